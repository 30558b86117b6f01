package conn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/base/kubeconfig"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Flags are how a command reaches CAS (an address, or a CAS resource
// through the API server) and trusts it (a pinned certificate, or its
// evidence): the flags every CLI command that talks to CAS shares, as
// cli-runtime's ConfigFlags are for a cluster. Their errors name them.
type Flags struct {
	// URL (--cas) and Cluster (--cluster, NAMESPACE/NAME) say where CAS
	// is; one of them is given.
	URL, Cluster string
	// Pod, with Cluster, is the one replica to reach (set by commands that
	// reach each replica in turn); empty: whichever answers.
	Pod string

	ca, identity            string
	kubeconfig, kubeContext string
	insecureSimulated       bool
	simKey                  string
	initTokenFile           string
	testRoots               string
	behindProxy             bool
	// used is the trust Client took, for Expect.
	used *Trust
}

// AddInitTokenFlag adds the flag of the commands that may initialise CAS.
func (f *Flags) AddInitTokenFlag(fs *pflag.FlagSet) {
	fs.StringVar(&f.initTokenFile, "init-token-file", "", "the init token CAS was started with (a standalone CAS writes init-token in its state folder); --cluster reads it from the CAS resource's Secret")
}

// InitToken is the init token from --init-token-file, or for --cluster
// from the Secret the operator made for the CAS resource.
func (f *Flags) InitToken(ctx context.Context) (string, error) {
	if f.initTokenFile != "" {
		raw, err := os.ReadFile(f.initTokenFile)
		if err != nil {
			return "", fmt.Errorf("--init-token-file: %w", err)
		}
		return strings.TrimSpace(string(raw)), nil
	}
	if f.Cluster == "" {
		return "", errors.New("--init-token-file is required: the init token CAS was started with (init-token in a standalone CAS's state folder)")
	}
	cl, err := f.ClusterOf()
	if err != nil {
		return "", err
	}
	return cl.InitToken(ctx)
}

// ClusterOf is the CAS resource of --cluster, reached through the API
// server of --kubeconfig.
func (f *Flags) ClusterOf() (*Cluster, error) {
	ref, err := ParseRef(f.Cluster)
	if err != nil {
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	cfg, err := kubeconfig.RESTConfig(f.kubeconfig, f.kubeContext)
	if err != nil {
		return nil, err
	}
	return &Cluster{Config: cfg, Ref: ref}, nil
}

// AddFlags adds the flags to fs.
func (f *Flags) AddFlags(fl *pflag.FlagSet) {
	fl.StringVarP(&f.URL, "cas", "c", "", "CAS address, https://HOST:PORT")
	fl.StringVar(&f.Cluster, "cluster", "", "a CAS resource, NAMESPACE/NAME, reached through the API server (port-forward): no LoadBalancer needed")
	fl.StringVar(&f.ca, "cas-ca", "", "PEM certificate to trust for CAS's TLS (its tls.crt, or a CA that issued it)")
	fl.StringVar(&f.identity, "cas-identity", "", "trust CAS by its evidence: a file (YAML or JSON) with the attestation policy CAS's evidence must meet (identities, acceptTCB)")
	fl.BoolVar(&f.insecureSimulated, "insecure-simulated-cas", false, "trust a CAS that vouches for itself with simulated evidence (no TEE), signed by its pinned simulation key: insecure, development only")
	fl.StringVar(&f.simKey, "cas-sim-key", "", "with --insecure-simulated-cas and --cas: the PEM public key CAS signs its simulated evidence with (simulation.pub.pem in a standalone CAS's state folder; "+CASKeyItem+" in a CAS resource's ConfigMap cas-NAME-simulation); --cluster takes it from the resource's status")
	fl.StringVar(&f.testRoots, verify.TestRootsFlag, "", "INSECURE, tests only: with --cas-identity, a PEM file of test roots (SEV-SNP ARK and ASK) CAS's evidence may chain to: a fake confidential VM's")
	fl.BoolVar(&f.behindProxy, "behind-proxy", false, "with --cas: CAS is reached through a TLS-terminating proxy or ingress, whose certificate --cas-ca pins (default: the system's roots); CAS is trusted by its statement over a fresh nonce and the evidence of the key that signed it (--cas-identity, or --insecure-simulated-cas with --cas-sim-key)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file for --cluster (default: $KUBECONFIG, then ~/.kube/config)")
	fl.StringVar(&f.kubeContext, "context", "", "kubeconfig context for --cluster")
}

// Client connects as the flags say, telling warn what insecure trust it
// took; done ends a port-forward.
func (f *Flags) Client(ctx context.Context, warn io.Writer) (c *casclient.Client, done func(), err error) {
	done = func() {}
	if (f.URL == "") == (f.Cluster == "") {
		return nil, done, errors.New("say where CAS is: --cas https://HOST:PORT or --cluster NAMESPACE/NAME (a CAS resource)")
	}
	if f.simKey != "" && (!f.insecureSimulated || f.Cluster != "") {
		return nil, done, errors.New("--cas-sim-key goes with --insecure-simulated-cas and --cas (--cluster takes the key from the CAS resource)")
	}
	if f.behindProxy && (f.URL == "" || (f.identity == "" && !f.insecureSimulated)) {
		return nil, done, errors.New("--behind-proxy goes with --cas (the proxy's address) and --cas-identity or --insecure-simulated-cas: CAS is trusted by its evidence, the proxy's certificate by --cas-ca")
	}
	if f.ca == "" && f.identity == "" && !f.insecureSimulated {
		return nil, done, errors.New("say how to trust CAS: --cas-ca FILE (its certificate), --cas-identity FILE (the evidence it must show) or --insecure-simulated-cas (development)")
	}
	if f.insecureSimulated && f.URL != "" && f.simKey == "" && (f.ca == "" || f.behindProxy) {
		return nil, done, fmt.Errorf("--insecure-simulated-cas with --cas: name CAS's simulation key with --cas-sim-key FILE (simulation.pub.pem in a standalone CAS's state folder; %s in a CAS resource's ConfigMap cas-NAME-simulation): any key signs a simulated quote", CASKeyItem)
	}
	url := f.URL
	var dial casclient.DialFunc
	var simKey string
	if f.Cluster != "" {
		var res *servicesv1beta1.CAS
		if url, dial, done, res, err = f.forward(ctx); err != nil {
			return nil, func() {}, err
		}
		simKey = res.Status.SimulationKey
		if f.insecureSimulated && res.Spec.Simulation && simKey == "" {
			return nil, done, fmt.Errorf("--cluster %s: the operator has not published CAS's simulation key yet (status.simulationKey)", f.Cluster)
		}
	} else if f.simKey != "" {
		raw, err := os.ReadFile(f.simKey)
		if err != nil {
			return nil, done, fmt.Errorf("--cas-sim-key: %w", err)
		}
		simKey = string(raw)
	}
	defer func() {
		if err != nil {
			done()
		}
	}()
	t, err := f.trust(simKey, warn)
	if err != nil {
		return nil, done, err
	}
	if f.ca != "" {
		if t.CA, err = os.ReadFile(f.ca); err != nil {
			return nil, done, fmt.Errorf("--cas-ca: %w", err)
		}
	}
	f.used = &t
	if f.behindProxy {
		c, err = t.Vouched(ctx, url, dial)
	} else {
		c, err = t.Client(ctx, url, dial)
	}
	switch {
	case err != nil && f.ca != "" && !f.behindProxy:
		return nil, done, fmt.Errorf("--cas-ca: %w", err)
	case attest.CheckOf(err) == attest.CheckSimulation:
		return nil, done, fmt.Errorf("%w (to trust it anyway, for development: --insecure-simulated-cas)", err)
	case err != nil:
		return nil, done, err
	}
	return c, done, nil
}

// Expect is what CAS's evidence must meet by the trust flags, for a
// check without a connection (an auditor bundle): --cas-identity, or
// --insecure-simulated-cas with --cas-sim-key; after Client, as it
// trusted CAS.
func (f *Flags) Expect(warn io.Writer) (casclient.Expect, error) {
	if f.used != nil && (f.identity != "" || f.insecureSimulated) {
		return f.used.expect() // after Client: the key a CAS resource published included
	}
	if f.identity == "" && !f.insecureSimulated {
		return casclient.Expect{}, errors.New("say what CAS's evidence must be: --cas-identity FILE, or --insecure-simulated-cas with --cas-sim-key FILE (development)")
	}
	if f.insecureSimulated && f.simKey == "" {
		return casclient.Expect{}, errors.New("--insecure-simulated-cas: name CAS's simulation key with --cas-sim-key FILE: any key signs a simulated quote")
	}
	var simKey string
	if f.simKey != "" {
		raw, err := os.ReadFile(f.simKey)
		if err != nil {
			return casclient.Expect{}, fmt.Errorf("--cas-sim-key: %w", err)
		}
		simKey = string(raw)
	}
	t, err := f.trust(simKey, warn)
	if err != nil {
		return casclient.Expect{}, err
	}
	return t.expect()
}

// trust is what the evidence flags say of CAS (--cas-identity, the test
// roots, simulation with simKey, its PEM key), without its certificate.
func (f *Flags) trust(simKey string, warn io.Writer) (Trust, error) {
	t := Trust{InsecureSimulated: f.insecureSimulated, SimKey: simKey, Warn: warn}
	if f.identity != "" {
		data, err := os.ReadFile(f.identity)
		if err != nil {
			return t, fmt.Errorf("--cas-identity: %w", err)
		}
		p, err := wire.ParseCASPolicy(data)
		if err != nil {
			return t, fmt.Errorf("--cas-identity %s: %w", f.identity, err)
		}
		t.Expect = *p
	}
	var err error
	t.TestRoots, err = verify.LoadTestRootsFlag(f.testRoots, warn)
	return t, err
}

// forward finds the CAS resource of --cluster and port-forwards to its
// pod (--pod's, or whichever replica takes it).
func (f *Flags) forward(ctx context.Context) (string, casclient.DialFunc, func(), *servicesv1beta1.CAS, error) {
	cl, err := f.ClusterOf()
	if err != nil {
		return "", nil, nil, nil, err
	}
	cas, pods, err := cl.Replicas(ctx)
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("--cluster %w", err)
	}
	if f.Pod != "" {
		pods = []string{f.Pod}
	}
	url, dial, stop, err := cl.Forward(ctx, pods)
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("--cluster %w", err)
	}
	return url, dial, stop, cas, nil
}
