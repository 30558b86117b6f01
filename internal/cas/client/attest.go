package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/base/x509sign"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Quoter produces evidence binding report data: the node's LAS, or a
// simulated quoter.
type Quoter interface {
	Quote(ctx context.Context, reportData []byte) (attest.Evidence, error)
}

// Files written by Attest into its directory (Contrast's tls-config
// names); env holds KEY=VALUE lines, files/ the policy's files by path.
const (
	CertChainFile = "certChain.pem"
	KeyFile       = "key.pem"
	MeshCAFile    = "mesh-ca.pem"
	RootCAFile    = "root-ca.pem"
	EnvFile       = "env"
	FilesDir      = "files"
	// MeshFile is the service's mesh authorization (wire.MeshAuthz, JSON).
	MeshFile = "mesh.json"
)

// Attest makes a key and CSR, gets evidence binding the key, attests as
// service of policy and writes the result into dir.
func (c *Client) Attest(ctx context.Context, policyName, service string, q Quoter, dir string) (*wire.AttestResult, error) {
	return c.AttestPinned(ctx, policyName, service, nil, q, dir)
}

// PinnedOwners is the owners a workload expects of its policy: Owners
// (fingerprints), of which Threshold must sign any change, or with none a
// policy without owners either (an immutable manifest).
type PinnedOwners struct {
	Owners    []string
	Threshold int
}

// check refuses a result of a policy the pinned owners do not hold alone:
// one with an owner they are not (whose key, public as owner keys are,
// a squatter lists beside theirs), or whose threshold is below the pinned
// one (fewer of them could change it than the workload was made for).
// Owner keys are public, so "one of them is among its owners" would be
// met by anyone's policy of the name.
func (p *PinnedOwners) check(policyName string, got []string, threshold int) error {
	if p == nil {
		return nil
	}
	if len(p.Owners) == 0 {
		if len(got) > 0 {
			return fmt.Errorf("policy %s has owners %v, but this workload was made for an owner-less one: it is another policy under the same name", policyName, got)
		}
		return nil
	}
	if len(got) == 0 {
		return fmt.Errorf("policy %s has no owners, but this workload was made for one owned by %v: it is another policy under the same name", policyName, p.Owners)
	}
	var strangers []string
	for _, o := range got {
		if !slices.Contains(p.Owners, o) {
			strangers = append(strangers, o)
		}
	}
	if len(strangers) > 0 {
		return fmt.Errorf("policy %s is also owned by %v, which this workload was not made for (it pins %v): whoever holds those keys could change what it receives, so it is another policy under the same name", policyName, strangers, p.Owners)
	}
	if threshold < p.Threshold {
		return fmt.Errorf("policy %s is changed by %d of its owners' signatures, fewer than the %d this workload was made for: it is another policy under the same name", policyName, threshold, p.Threshold)
	}
	return nil
}

// AttestPinned is Attest for a workload that pins its policy's owners:
// a result of a policy they do not own is refused before anything is
// written.
func (c *Client) AttestPinned(ctx context.Context, policyName, service string, pin *PinnedOwners, q Quoter, dir string) (*wire.AttestResult, error) {
	res, key, err := c.Attested(ctx, policyName, service, pin, q)
	if err != nil {
		return nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return res, write(dir, res, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
}

// Attested makes a key and its CSR, gets evidence binding the key and
// attests as service of policy; it returns the result, checked (the pinned
// owners, a certificate for this key) and opened, with the key.
func (c *Client) Attested(ctx context.Context, policyName, service string, pin *PinnedOwners, q Quoter) (*wire.AttestResult, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509sign.CertificateRequest(&x509.CertificateRequest{}, key)
	if err != nil {
		return nil, nil, err
	}
	binding, err := wire.KeyBinding(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	ev, err := q.Quote(ctx, binding)
	if err != nil {
		return nil, nil, fmt.Errorf("getting evidence: %w", err)
	}
	res, err := c.AttestRaw(ctx, &wire.AttestRequest{Policy: policyName, Service: service, Evidence: ev,
		CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
	if err != nil {
		return nil, nil, err
	}
	if err := pin.check(policyName, res.Owners, res.OwnerThreshold); err != nil {
		return nil, nil, err
	}
	if err := certifies(res.Certificate, &key.PublicKey); err != nil {
		return nil, nil, err
	}
	if err := res.Open(key, policyName, service); err != nil {
		return nil, nil, err
	}
	return res, key, nil
}

// certifies checks that the first certificate of chain (PEM) is for key:
// one for another key would leave the workload with a key and a
// certificate that do not belong together.
func certifies(chain string, key *ecdsa.PublicKey) error {
	block, _ := pem.Decode([]byte(chain))
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("CAS's answer has no certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("CAS's certificate: %w", err)
	}
	if !key.Equal(leaf.PublicKey) {
		return errors.New("CAS's certificate is for another key than this workload's")
	}
	return nil
}

func write(dir string, res *wire.AttestResult, keyPEM []byte) error {
	var env strings.Builder
	for _, k := range slices.Sorted(maps.Keys(res.Env)) {
		line, err := envLine(k, res.Env[k])
		if err != nil {
			return err
		}
		env.WriteString(line)
	}
	mesh, err := json.Marshal(res.Mesh)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		CertChainFile: []byte(res.Certificate),
		KeyFile:       keyPEM,
		MeshCAFile:    []byte(res.MeshCA),
		RootCAFile:    []byte(res.RootCA),
		EnvFile:       []byte(env.String()),
		MeshFile:      mesh,
	}
	for p, content := range res.Files {
		rel := filepath.Clean(strings.TrimPrefix(p, "/"))
		if rel == "." || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("CAS sent a file with a bad path %q", p)
		}
		files[filepath.Join(FilesDir, rel)] = []byte(content)
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return err
		}
	}
	return nil
}

var (
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	envBare = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]*$`)
)

// envLine is one NAME=value line of the env file, which a POSIX shell
// sources (set -a; . env): a value of plain characters as it is, any other
// single-quoted, so no newline, quote or $ in a value can end it early
// and add a variable or run a command.
func envLine(name, value string) (string, error) {
	if !envName.MatchString(name) {
		return "", fmt.Errorf("CAS sent an environment variable with a bad name %q", name)
	}
	if envBare.MatchString(value) {
		return name + "=" + value + "\n", nil
	}
	return name + "='" + strings.ReplaceAll(value, "'", `'\''`) + "'\n", nil
}
