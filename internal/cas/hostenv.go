package cas

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// HostChosen are the flags whose values the host may choose for a CAS in
// an SGX enclave, whose Gramine manifest fixes every other flag in its
// measured command line (loader.argv). Each is safe in the host's hands:
// which CAS resource's state it is (sealed under the root seed), this
// node's name (the slot of a sealed seed only this enclave on this CPU
// opens), the Service names of the TLS certificate and of the peers (who
// are attested either way), and where collateral comes from (checked
// against the pinned vendor roots). A host that lies starves CAS at
// worst; it never makes CAS trust, seal or serve otherwise. The sealer,
// --tee and every simulation flag are never among them, nor any path: a
// host that named the file CAS sends to PCS as its API key could name the
// enclave's sealing key (Gramine's /dev/attestation/keys).
var HostChosen = []string{"store", "node", "tls-san", "peers", "pcs", "kds"}

// HostEnvPrefix starts the environment variable of each HostChosen flag:
// --tls-san is CLOISTER_CAS_TLS_SAN.
const HostEnvPrefix = "CLOISTER_CAS_"

// HostEnv is the environment variable that carries flag's value.
func HostEnv(flag string) string {
	return HostEnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// ApplyHostEnv, with --host-env, sets each HostChosen flag of fs from its
// environment variable (HostEnv), after the command line was parsed. A
// host-chosen flag also given on the command line is refused: the
// manifest leaves those to the host, and one value must not hide another.
// Without --host-env it does nothing.
func (c *Config) ApplyHostEnv(fs *flag.FlagSet, getenv func(string) string) error {
	if !c.HostEnv {
		return nil
	}
	if !c.TEE {
		return errors.New("--host-env is for a CAS in an enclave whose manifest fixes its command line: give --tee")
	}
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(HostChosen, f.Name) {
			errs = append(errs, fmt.Errorf("--%s: with --host-env the host chooses it, in %s, not the command line", f.Name, HostEnv(f.Name)))
		}
	})
	for _, name := range HostChosen {
		v := getenv(HostEnv(name))
		if v == "" {
			continue
		}
		err := checkHostValue(name, v)
		if err == nil {
			err = fs.Set(name, v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", HostEnv(name), err))
		}
	}
	return errors.Join(errs...)
}

// maxHostValue bounds each host-chosen value: a handful of names or one
// URL.
const maxHostValue = 2048

// checkHostValue refuses a host-chosen value that is not what its flag
// takes: the host is not trusted, and a value CAS would only fail on
// later is refused here, by name.
func checkHostValue(name, v string) error {
	if len(v) > maxHostValue {
		return fmt.Errorf("%d bytes, more than %d", len(v), maxHostValue)
	}
	var errs []string
	switch name {
	case "store":
		ns, cas, err := parseKubeStore(v)
		if err != nil {
			return err
		}
		errs = append(validation.IsDNS1123Label(ns), validation.IsDNS1123Subdomain(cas)...)
	case "node":
		errs = validation.IsDNS1123Subdomain(v)
	case "peers":
		errs = validation.IsDNS1035Label(v)
	case "tls-san":
		for _, san := range strings.Split(v, ",") {
			if net.ParseIP(san) == nil {
				errs = append(errs, validation.IsDNS1123Subdomain(san)...)
			}
		}
	case "pcs", "kds":
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			errs = []string{"an http(s) URL of a host, with no user"}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%q: %s", v, strings.Join(errs, "; "))
	}
	return nil
}
