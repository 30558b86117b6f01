package cas_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// readyCAS is cloister-cas on loopback, initialised, with its client.
func readyCAS(t testing.TB) *casclient.Client {
	t.Helper()
	c, _, _ := readyCASAt(t)
	return c
}

// readyCASAt is readyCAS with its URL and TLS certificate.
func readyCASAt(t testing.TB) (*casclient.Client, string, []byte) {
	t.Helper()
	url, caFile, _ := castest.Start(t, t.TempDir(), "none")
	c, ca := initAt(t, url, caFile)
	return c, url, ca
}

// initAt initialises the CAS at url, whose TLS certificate is caFile in
// its state folder (with its init token), and returns its client and
// that certificate.
func initAt(t testing.TB, url, caFile string) (*casclient.Client, []byte) {
	t.Helper()
	ca, _ := os.ReadFile(caFile)
	c, err := casclient.New(url, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := policy.NewKey()
	if _, err := c.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, filepath.Dir(caFile)), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	return c, ca
}

func pemKey(k *ecdsa.PrivateKey) string {
	return strings.ReplaceAll(string(policy.MarshalPublicKey(&k.PublicKey)), "\n", `\n`)
}

// sign signs doc where it goes next in c's chain, as cloister set does.
func sign(t testing.TB, c *casclient.Client, doc string, keys ...*ecdsa.PrivateKey) wire.PolicyRequest {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	link, err := c.LinkFor(context.Background(), d.Name, d.Digest())
	if err != nil {
		t.Fatal(err)
	}
	s := &policy.Signed{Policy: doc, Link: link}
	if link.Version == 1 {
		keys = append(keys, castest.BoardKey()) // a new name: the board approves it
	}
	for _, k := range keys {
		if err := policy.Sign(s, k); err != nil {
			t.Fatal(err)
		}
	}
	return wire.PolicyRequest{Policy: s.Policy, Link: s.Link, Signatures: s.Signatures}
}

// simRequest is an attestation request for service with sim evidence
// whose claims edit may change.
func simRequest(t *testing.T, policyName, service string, edit func(*attest.Claims)) *wire.AttestRequest {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	csr, _ := x509.ParseCertificateRequest(der)
	binding, _ := wire.KeyBinding(csr.PublicKey)
	c := attest.Claims{TCBStatus: attest.TCBUpToDate, ReportData: binding,
		SGX: &attest.SGXIdentity{MRENCLAVE: []byte(strings.Repeat("\x11", 32)), MRSIGNER: make([]byte, 32)}}
	if edit != nil {
		edit(&c)
	}
	ev, err := sim.Generate(castest.LASKey(), c, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req := &wire.AttestRequest{Policy: policyName, Service: service, Evidence: attest.Evidence{Type: attest.Sim, Raw: ev},
		CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})}
	requestKeys.Store(string(req.CSR), key)
	return req
}

// attestedCert attests service of policyName with sim evidence and
// returns the workload's certificate.
func attestedCert(t *testing.T, c *casclient.Client, policyName, service string) *x509.Certificate {
	t.Helper()
	res, err := attestOpen(t, c, simRequest(t, policyName, service, nil))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(res.Certificate))
	if block == nil {
		t.Fatalf("no certificate in %q", res.Certificate)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// requestKeys are the workload keys of simRequest's requests, by CSR.
var requestKeys sync.Map

// attestOpen attests req over HTTPS and opens the result with the
// request's key, as the workload does.
func attestOpen(t *testing.T, c *casclient.Client, req *wire.AttestRequest) (*wire.AttestResult, error) {
	t.Helper()
	res, err := c.AttestRaw(context.Background(), req)
	if err != nil {
		return nil, err
	}
	key, _ := requestKeys.Load(string(req.CSR))
	return res, res.Open(key.(*ecdsa.PrivateKey), req.Policy, req.Service)
}

// Each rejection comes back over HTTPS as 403 with the failing check.
func TestAttestRejectionsOverHTTPS(t *testing.T) {
	c := readyCAS(t)
	owner, _ := policy.NewKey()
	doc := func(name, sim string) string {
		return `version: cloister.dev/policy/v1
name: ` + name + `
owners: {keys: ["` + pemKey(owner) + `"]}
` + sim + `
services: [{name: api, attestation: {identities: [{type: sgx, mrenclave: "` + strings.Repeat("11", 32) + `"}]}, certificate: {sans: [api.` + name + `]}}]
`
	}
	for _, d := range []string{doc("lax", "allowSimulation: true"), doc("strict", "")} {
		if _, err := c.RegisterPolicy(context.Background(), sign(t, c, d, owner)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AttestRaw(context.Background(), simRequest(t, "lax", "api", nil)); err != nil {
		t.Fatalf("the accepted case: %v", err)
	}
	unbound := simRequest(t, "lax", "api", nil)
	unbound.CSR = simRequest(t, "lax", "api", nil).CSR
	for _, tc := range []struct {
		name   string
		req    *wire.AttestRequest
		reason string
	}{
		{"identity not in the policy", simRequest(t, "lax", "api", func(c *attest.Claims) { c.SGX.MRENCLAVE[5] = 0 }), "identity"},
		{"debug", simRequest(t, "lax", "api", func(c *attest.Claims) { c.Debug = true }), "debug"},
		{"TCB not accepted", simRequest(t, "lax", "api", func(c *attest.Claims) { c.TCBStatus = attest.TCBRevoked }), "tcb-status"},
		{"report data not binding the CSR", unbound, "report-data"},
		{"sim without allowSimulation", simRequest(t, "strict", "api", nil), "simulation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AttestRaw(context.Background(), tc.req)
			var apiErr *casclient.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != 403 || apiErr.Reason != tc.reason {
				t.Errorf("got %v, want 403 %s", err, tc.reason)
			}
		})
	}
}

// Updates over HTTPS: below the owners' threshold refused and nothing
// changes; with it accepted, and the history of both versions verifies.
func TestPolicyUpdateOverHTTPS(t *testing.T) {
	c := readyCAS(t)
	a, _ := policy.NewKey()
	b, _ := policy.NewKey()
	doc := func(validity string) string {
		return `version: cloister.dev/policy/v1
name: shop
owners: {threshold: 2, keys: ["` + pemKey(a) + `", "` + pemKey(b) + `"]}
allowSimulation: true
services: [{name: api, attestation: {identities: []}, certificate: {sans: [api], validity: ` + validity + `}}]
`
	}
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, doc("1h"), a, b)); err != nil {
		t.Fatal(err)
	}
	_, err := c.RegisterPolicy(context.Background(), sign(t, c, doc("2h"), a))
	var apiErr *casclient.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 403 || !strings.Contains(apiErr.Message, "signed by 1 of the owners of version 1, 2 needed") {
		t.Fatalf("update with one of two signatures: %v", err)
	}
	if h, err := c.History(context.Background(), "shop"); err != nil || len(h.Records) != 1 {
		t.Fatalf("a refused update changed the history: %v", err)
	}
	if r, err := c.RegisterPolicy(context.Background(), sign(t, c, doc("2h"), a, b)); err != nil || r.Version != 2 {
		t.Fatalf("update with both: %+v %v", r, err)
	}
	// Read by an owner: the policy's read access is the default, owners.
	h, err := c.ReadHistory(context.Background(), "shop", a)
	if err != nil || len(h.Records) != 2 || !strings.Contains(h.Records[1].Policy, "validity: 2h") {
		t.Fatalf("history: %v", err)
	}
	key, err := policy.ParsePublicKey([]byte(h.HistoryKey))
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.VerifyHistory(h.Records, key); err != nil {
		t.Errorf("history chain: %v", err)
	}
	// The rollback attack: version 1's record (its SignedPolicy is in the
	// cluster for anyone who may read resources) POSTed back. Refused, as signed and as any other
	// version; the current version stays version 2.
	first := h.Records[0]
	for _, replay := range []wire.PolicyRequest{
		{Policy: first.Policy, Link: policy.Link{Version: first.Version, Predecessor: first.Predecessor}, Signatures: first.Signatures},
		{Policy: first.Policy, Link: policy.Link{Version: 3, Predecessor: h.Records[1].Digest}, Signatures: first.Signatures},
	} {
		if _, err := c.RegisterPolicy(context.Background(), replay); !errors.As(err, &apiErr) || (apiErr.Reason != wire.ReasonSuperseded && apiErr.Reason != wire.ReasonUnauthorized) {
			t.Errorf("version 1 replayed as version %d: %v", replay.Version, err)
		}
		if cur, err := c.ReadHistory(context.Background(), "shop", b); err != nil || len(cur.Records) != 2 || !strings.Contains(cur.Records[1].Policy, "validity: 2h") {
			t.Fatalf("after replaying version 1 as version %d, CAS holds %+v (%v)", replay.Version, cur, err)
		}
	}
	// Sealed to another CAS's key: a clear error.
	other, _ := policy.NewEncryptionKey([]byte("some other CAS's seed material.."))
	s := &policy.Signed{Policy: doc("3h"), Link: policy.Link{Version: 3, Predecessor: h.Records[1].Digest}}
	if err := policy.Sign(s, a); err != nil {
		t.Fatal(err)
	}
	e, _ := policy.Encrypt(s, other.PublicKey())
	_, err = c.RegisterPolicy(context.Background(), wire.PolicyRequest{Policy: e.Policy, EncryptionKey: e.EncryptionKey})
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, "the policy is sealed to key") {
		t.Errorf("sealed to another key: %v", err)
	}
}

// A policy named NAMESPACE/NAME travels in one path segment: it is
// registered, read, updated and attested as itself, and its workloads'
// identity names it whole.
func TestNamespacedPolicyOverHTTPS(t *testing.T) {
	c := readyCAS(t)
	a, _ := policy.NewKey()
	doc := func(validity string) string {
		return "version: cloister.dev/policy/v1\nname: team/shop\nowners: {keys: [\"" + pemKey(a) + "\"]}\nallowSimulation: true\n" +
			"services: [{name: api, attestation: {identities: []}, certificate: {sans: [api.team], validity: " + validity + "}}]\n"
	}
	ctx := context.Background()
	for _, v := range []string{"1h", "2h"} {
		if _, err := c.RegisterPolicy(ctx, sign(t, c, doc(v), a)); err != nil {
			t.Fatalf("validity %s: %v", v, err)
		}
	}
	if h, err := c.ReadHistory(ctx, "team/shop", a); err != nil || len(h.Records) != 2 || h.Records[1].Name != "team/shop" {
		t.Fatalf("history of team/shop: %+v %v", h, err)
	}
	if _, err := c.History(ctx, "team"); err == nil {
		t.Error("the namespace reads as a policy of its own")
	}
	cert := attestedCert(t, c, "team/shop", "api")
	if id, err := wire.CertMeshID(cert); err != nil || id.Policy != "team/shop" || id.Service != "api" {
		t.Errorf("the workload's identity: %+v %v", id, err)
	}
	if cert.Subject.CommonName != "api.shop.team" {
		t.Errorf("the workload's subject: %s", cert.Subject)
	}
}

// Against a real CAS over HTTPS: a certificate name another policy holds
// is refused (409 name-taken), a wildcard its owners alone signed is
// refused (400), and an address its owners signed (a LoadBalancer IP)
// enters the workload's certificate.
func TestCertificateNamesOverHTTPS(t *testing.T) {
	c := readyCAS(t)
	shopOwner, _ := policy.NewKey()
	stranger, _ := policy.NewKey()
	doc := func(name string, owner *ecdsa.PrivateKey, sans string) string {
		return "version: cloister.dev/policy/v1\nname: " + name + "\nowners: {keys: [\"" + pemKey(owner) + "\"]}\nallowSimulation: true\n" +
			"services: [{name: api, attestation: {identities: []}, certificate: {sans: [" + sans + "]}}]\n"
	}
	ctx := context.Background()
	if _, err := c.RegisterPolicy(ctx, sign(t, c, doc("shop", shopOwner, "api.shop.svc"), shopOwner)); err != nil {
		t.Fatal(err)
	}
	var apiErr *casclient.APIError
	_, err := c.RegisterPolicy(ctx, sign(t, c, doc("ledger", stranger, "api.shop.svc"), stranger))
	if !errors.As(err, &apiErr) || apiErr.Status != 409 || apiErr.Reason != wire.ReasonNameTaken || !strings.Contains(apiErr.Message, "held by policy shop") {
		t.Errorf("a name the shop holds: %v", err)
	}
	_, err = c.RegisterPolicy(ctx, sign(t, c, doc("shop", shopOwner, `api.shop.svc, "*.svc"`), shopOwner))
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, `"*.svc" is a wildcard`) {
		t.Errorf("a wildcard without the board: %v", err)
	}
	const lbIP = "203.0.113.10" // TEST-NET-3: a documentation address, never routed
	if _, err := c.RegisterPolicy(ctx, sign(t, c, doc("shop", shopOwner, "api.shop.svc, "+lbIP), shopOwner)); err != nil {
		t.Fatalf("the owners' LoadBalancer IP: %v", err)
	}
	cert := attestedCert(t, c, "shop", "api")
	if err := cert.VerifyHostname(lbIP); err != nil {
		t.Errorf("the workload's certificate does not name the LoadBalancer IP: %v", err)
	}
	_, err = c.RegisterPolicy(ctx, sign(t, c, doc("ledger", stranger, lbIP), stranger))
	if !errors.As(err, &apiErr) || apiErr.Reason != wire.ReasonNameTaken {
		t.Errorf("the shop's LoadBalancer IP taken by another policy: %v", err)
	}
}

// Over HTTPS: a service gets its secrets, the same on every attestation;
// another service of the policy gets none of them.
func TestSecretsOverHTTPS(t *testing.T) {
	c := readyCAS(t)
	owner, _ := policy.NewKey()
	doc := `version: cloister.dev/policy/v1
name: shop
owners: {keys: ["` + pemKey(owner) + `"]}
allowSimulation: true
services:
- {name: api, attestation: {identities: []}, certificate: {sans: [api.shop.svc]}, env: {K: "{{ .Secrets.k.Base64 }}"}, secrets: [k]}
- {name: worker, attestation: {identities: []}, certificate: {sans: [worker.shop.svc]}}
secrets: [{name: k, kind: symmetric-key}]
`
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, doc, owner)); err != nil {
		t.Fatal(err)
	}
	first, err := attestOpen(t, c, simRequest(t, "shop", "api", nil))
	if err != nil {
		t.Fatal(err)
	}
	second, err := attestOpen(t, c, simRequest(t, "shop", "api", nil))
	if err != nil {
		t.Fatal(err)
	}
	if first.Env["K"] == "" || first.Env["K"] != second.Env["K"] || first.Secrets["k"]["Hex"] != second.Secrets["k"]["Hex"] {
		t.Errorf("secret differs between attestations: %q %q", first.Env["K"], second.Env["K"])
	}
	worker, err := attestOpen(t, c, simRequest(t, "shop", "worker", nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(worker.Secrets) != 0 || len(worker.Env) != 0 || strings.Contains(worker.Certificate+worker.MeshCA, first.Secrets["k"]["Base64"]) {
		t.Errorf("worker got %v %v", worker.Secrets, worker.Env)
	}
}
