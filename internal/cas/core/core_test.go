package core

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/statemark"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// fixture is a CAS on a real store in a temp dir, initialised with
// recovery owners, and a policy owner key.
type fixture struct {
	t      *testing.T
	dir    string
	db     *store.Bolt
	cas    *CAS
	shares *wire.Shares
	rec    []*ecdsa.PrivateKey // recovery owners
	owner  *ecdsa.PrivateKey   // policy owner
	lasKey *ecdsa.PrivateKey   // signs sim evidence
	// noSimulation opens CAS without AllowSimulation.
	noSimulation bool
	// maxPolicies and maxPerNamespace are CAS's quotas (0: default).
	maxPolicies, maxPerNamespace int
	// marks keeps the state's high-water mark across f.open (nil: none).
	marks statemark.Store
}

func newFixture(t *testing.T, sealer seal.Sealer, k, n int) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir()}
	f.lasKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.open(sealer)
	var pubs []*ecdsa.PublicKey
	for range n {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		f.rec = append(f.rec, key)
		pubs = append(pubs, &key.PublicKey)
	}
	var err error
	if f.shares, err = f.cas.Init(pubs, k, testToken); err != nil {
		t.Fatal(err)
	}
	f.owner, _ = policy.NewKey()
	return f
}

func (f *fixture) open(sealer seal.Sealer) {
	f.t.Helper()
	if f.db != nil {
		if err := f.db.Close(); err != nil {
			f.t.Fatal(err)
		}
	}
	var err error
	if f.db, err = store.OpenBolt(f.dir); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = f.db.Close() }) // closed already when the test reopened it
	if f.cas, err = Open(Config{Store: f.db, Sealer: sealer, InitToken: FixedToken(testToken), SimKeys: pinned{&f.lasKey.PublicKey}, AllowSimulation: !f.noSimulation,
		MaxPolicies: f.maxPolicies, MaxPerNamespace: f.maxPerNamespace, Marks: f.marks}); err != nil {
		f.t.Fatal(err)
	}
}

// testToken is the fixtures' init token.
const testToken = "fixture-init-token"

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ")
}

// policyText: services api (reads dbKey, tls) and worker (reads nothing).
func (f *fixture) policyText(extra string) string {
	return `version: cloister.dev/policy/v1
name: shop
owners:
  keys:
  - |
` + indent(string(policy.MarshalPublicKey(&f.owner.PublicKey))) + `
allowSimulation: true
services:
- name: api
  attestation:
    identities: [{type: sgx, mrenclave: "` + strings.Repeat("ab", 32) + `"}]
  certificate: {sans: [api.shop.svc, 10.1.2.3], validity: 2h}
  env: {DB_KEY: "{{ .Secrets.dbKey.Hex }}"}
  files: {/run/tls/key.pem: "{{ .Secrets.tls.Key }}"}
  secrets: [dbKey, tls]
- name: worker
  attestation: {identities: []}
  certificate: {sans: [worker.shop.svc]}
secrets:
- {name: dbKey, kind: symmetric-key}
- {name: tls, kind: ecdsa-cert}
` + extra
}

// register signs text where it goes next in its chain (the current
// version's own place for the same document), as cloister set does.
func (f *fixture) register(text string, signers ...*ecdsa.PrivateKey) (*wire.Registration, error) {
	f.t.Helper()
	link := f.next(text)
	if link.Version == 1 {
		// A new name: the board (the recovery owners by default, a
		// majority of them) approves it, as cloister policy sign --key
		// BOARD.pem does.
		signers = append(signers, f.rec[:majority(len(f.rec))]...)
	}
	return f.registerAt(text, link, signers...)
}

func (f *fixture) next(text string) policy.Link {
	f.t.Helper()
	d, err := policy.Parse([]byte(text))
	if err != nil {
		f.t.Fatal(err)
	}
	cur, err := f.cas.Policy(d.Name)
	switch {
	case errors.Is(err, ErrNotFound):
		return policy.Link{Version: 1}
	case err != nil:
		f.t.Fatal(err)
	case cur.Digest == d.Digest():
		return policy.Link{Version: cur.Version, Predecessor: cur.Predecessor}
	}
	return policy.Link{Version: cur.Version + 1, Predecessor: cur.Digest}
}

func (f *fixture) registerAt(text string, link policy.Link, signers ...*ecdsa.PrivateKey) (*wire.Registration, error) {
	f.t.Helper()
	s := &policy.Signed{Policy: text, Link: link}
	for _, k := range signers {
		if err := policy.Sign(s, k); err != nil {
			f.t.Fatal(err)
		}
	}
	return f.cas.Register(s)
}

// request makes a key, its CSR and sim evidence; edit changes the claims.
func (f *fixture) request(service string, edit func(*attest.Claims)) *wire.AttestRequest {
	f.t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	csr, _ := x509.ParseCertificateRequest(der)
	binding, _ := wire.KeyBinding(csr.PublicKey)
	c := attest.Claims{TCBStatus: attest.TCBUpToDate, ReportData: binding,
		SGX: &attest.SGXIdentity{MRENCLAVE: []byte(strings.Repeat("\xab", 32)), MRSIGNER: make([]byte, 32)}}
	if edit != nil {
		edit(&c)
	}
	ev, err := sim.Generate(f.lasKey, c, time.Now(), time.Minute)
	if err != nil {
		f.t.Fatal(err)
	}
	req := &wire.AttestRequest{Policy: "shop", Service: service, Evidence: attest.Evidence{Type: attest.Sim, Raw: ev},
		CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})}
	requestKeys.Store(string(req.CSR), key)
	return req
}

// requestKeys are the workload keys of the requests made, by CSR.
var requestKeys sync.Map

// attest attests req and opens the result with the request's key, as the
// workload does.
func (f *fixture) attest(req *wire.AttestRequest) (*wire.AttestResult, error) {
	f.t.Helper()
	res, err := f.cas.Attest(req)
	if err != nil {
		return nil, err
	}
	key, _ := requestKeys.Load(string(req.CSR))
	return res, res.Open(key.(*ecdsa.PrivateKey), req.Policy, req.Service)
}

func TestAttest(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	res, err := f.attest(f.request("api", nil))
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode([]byte(res.Certificate))
	leaf, _ := x509.ParseCertificate(block.Bytes)
	mesh := x509.NewCertPool()
	mesh.AppendCertsFromPEM([]byte(res.MeshCA))
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: mesh, DNSName: "api.shop.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("certificate does not verify to the mesh CA for api.shop.svc: %v", err)
	}
	if len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "10.1.2.3" || !strings.Contains(string(rest), "mesh CA") && len(rest) == 0 {
		t.Errorf("certificate names %v %v", leaf.DNSNames, leaf.IPAddresses)
	}
	if len(res.Env["DB_KEY"]) != 64 || res.Env["DB_KEY"] != res.Secrets["dbKey"]["Hex"] || !strings.Contains(res.Files["/run/tls/key.pem"], "PRIVATE KEY") {
		t.Errorf("env %v files %v", res.Env, res.Files)
	}
	again, err := f.attest(f.request("api", nil))
	if err != nil || again.Env["DB_KEY"] != res.Env["DB_KEY"] || again.Secrets["tls"]["Cert"] != res.Secrets["tls"]["Cert"] {
		t.Errorf("a second attestation got other secrets: %v", err)
	}
	other, err := f.attest(f.request("worker", nil))
	if err != nil || len(other.Secrets) != 0 || other.Env != nil {
		t.Errorf("worker got secrets %v (%v)", other.Secrets, err)
	}
	// The same request again, as whoever captured it would send it: a
	// certificate for a key the replayer does not hold, and secrets
	// sealed to that key. Nothing of them is in clear, and no other key
	// opens them.
	req := f.request("api", nil)
	if _, err := f.attest(req); err != nil {
		t.Fatal(err)
	}
	replayed, err := f.cas.Attest(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(replayed)
	for _, v := range []string{res.Env["DB_KEY"], res.Secrets["dbKey"]["Base64"], "PRIVATE KEY"} {
		if strings.Contains(string(raw), v) {
			t.Errorf("a replayed request's answer shows %q", v)
		}
	}
	thief, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err := replayed.Open(thief, "shop", "api"); err == nil || replayed.Env != nil {
		t.Errorf("another key opened the sealed result: %v", err)
	}
	key, _ := requestKeys.Load(string(req.CSR))
	if err := replayed.Open(key.(*ecdsa.PrivateKey), "shop", "worker"); err == nil {
		t.Error("the result opened as another service's")
	}
}

func TestAttestRejections(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	noSim := f.policyText("")
	noSim = strings.Replace(noSim, "allowSimulation: true\n", "", 1)
	noSim = strings.Replace(noSim, "name: shop", "name: strict", 1)
	noSim = strings.NewReplacer("api.shop.svc, 10.1.2.3", "api.strict.svc", "worker.shop.svc", "worker.strict.svc").Replace(noSim)
	noSim = strings.Replace(noSim, "  attestation: {identities: []}\n", "  attestation: {identities: [{type: nitro, pcrs: {0: \""+strings.Repeat("ab", 48)+"\"}}]}\n", 1)
	if _, err := f.register(noSim, f.owner); err != nil {
		t.Fatal(err)
	}
	strict := f.request("api", nil)
	strict.Policy = "strict"
	otherKey := f.request("api", nil)
	otherKey.CSR = f.request("api", nil).CSR
	for _, tc := range []struct {
		name string
		req  *wire.AttestRequest
		err  error
		want string
	}{
		{"identity not in the policy", f.request("api", func(c *attest.Claims) { c.SGX.MRENCLAVE[0] = 0 }), ErrRejected, "identity: no expected identity matches"},
		{"debug", f.request("api", func(c *attest.Claims) { c.Debug = true }), ErrRejected, "debug: "},
		{"TCB not accepted", f.request("api", func(c *attest.Claims) { c.TCBStatus = attest.TCBOutOfDate }), ErrRejected, `tcb-status: TCB status "OutOfDate" is not accepted`},
		{"report data not binding the CSR", otherKey, ErrRejected, "report-data: "},
		{"sim without allowSimulation", strict, ErrRejected, "simulation: "},
		{"unknown service", &wire.AttestRequest{Policy: "shop", Service: "nope"}, ErrNotFound, `service "nope"`},
		{"unknown policy", &wire.AttestRequest{Policy: "nope"}, ErrNotFound, `policy "nope"`},
		{"bad CSR", &wire.AttestRequest{Policy: "shop", Service: "api", CSR: []byte("x")}, ErrInvalid, "csr: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.cas.Attest(tc.req)
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %v (%q)", err, tc.err, tc.want)
			}
		})
	}
}

// A CAS that does not allow simulation refuses simulated evidence even for
// a policy that allows it, and says how simulation is asked for.
func TestSimulationRefusedByCAS(t *testing.T) {
	sealer := seal.FileSealer{Path: t.TempDir() + "/seed"}
	f := newFixture(t, sealer, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cas.Attest(f.request("api", nil)); err != nil {
		t.Fatalf("with simulation allowed: %v", err)
	}
	f.noSimulation = true
	f.open(sealer)
	_, err := f.cas.Attest(f.request("api", nil))
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "simulation: ") || !strings.Contains(err.Error(), "spec.simulation") {
		t.Fatalf("simulated evidence at a CAS without simulation: %v", err)
	}
	// And it refuses a policy only simulated evidence could meet: its
	// worker service has identities: [], which would read as "anyone".
	// The policy CAS held from before is unchanged.
	changed := strings.Replace(f.policyText(""), "validity: 2h", "validity: 3h", 1)
	if _, err := f.register(changed, f.owner); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "services[1] (worker): no hardware identity") {
		t.Errorf("a simulated-only service at a CAS without simulation: %v", err)
	}
	simOnly := strings.Replace(changed, "  attestation: {identities: []}\n", "  attestation: {identities: [{type: sim, hostData: \""+strings.Repeat("ab", 32)+"\"}]}\n", 1)
	if _, err := f.register(simOnly, f.owner); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "services[1] (worker): no hardware identity") {
		t.Errorf("a sim identity at a CAS without simulation: %v", err)
	}
	hardware := strings.Replace(changed, "  attestation: {identities: []}\n", "  attestation: {identities: [{type: snp, measurement: \""+strings.Repeat("ab", 48)+"\", hostData: \""+strings.Repeat("cd", 32)+"\"}]}\n", 1)
	if r, err := f.register(hardware, f.owner); err != nil || r.Version != 2 {
		t.Errorf("measured identities at a CAS without simulation: %+v %v", r, err)
	}
}

func TestPolicyUpdatesAndHistory(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	second, _ := policy.NewKey()
	twoOwners := strings.Replace(f.policyText(""), "owners:\n  keys:\n", "owners:\n  threshold: 2\n  keys:\n  - |\n"+indent(string(policy.MarshalPublicKey(&second.PublicKey)))+"\n", 1)
	if _, err := f.register(twoOwners, f.owner); err == nil || !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "signed by 1 of its owners, 2 needed") {
		t.Fatalf("new policy with 1 of 2 signatures: %v", err)
	}
	r, err := f.register(twoOwners, f.owner, second)
	if err != nil || r.Version != 1 {
		t.Fatalf("register: %+v %v", r, err)
	}
	// The same content again: a no-op.
	if r, err := f.register(twoOwners, second, f.owner); err != nil || !r.Unchanged || r.Version != 1 {
		t.Errorf("same content: %+v %v", r, err)
	}
	changed := strings.Replace(twoOwners, "validity: 2h", "validity: 3h", 1)
	// An outsider's signatures do not count; one owner is not enough.
	outsider, _ := policy.NewKey()
	for _, signers := range [][]*ecdsa.PrivateKey{{f.owner}, {outsider}, {f.owner, outsider}} {
		if _, err := f.register(changed, signers...); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("update signed by %d keys: %v", len(signers), err)
		}
	}
	if cur, _ := f.cas.Policy("shop"); cur.Version != 1 || cur.Policy != twoOwners {
		t.Fatalf("a refused update changed the stored policy: version %d", cur.Version)
	}
	// Taking over by listing new owners in the update does not work either.
	takeover := strings.Replace(changed, "threshold: 2", "threshold: 1", 1)
	takeover = strings.Replace(takeover, indent(string(policy.MarshalPublicKey(&second.PublicKey))), indent(string(policy.MarshalPublicKey(&outsider.PublicKey))), 1)
	if _, err := f.register(takeover, outsider, f.owner); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("takeover: %v", err)
	}
	if r, err := f.register(changed, f.owner, second); err != nil || r.Version != 2 {
		t.Fatalf("update with both owners: %+v %v", r, err)
	}
	h, err := f.cas.History("shop")
	if err != nil || len(h) != 2 || h[0].Policy != twoOwners || h[1].Policy != changed {
		t.Fatalf("history %d records, %v", len(h), err)
	}
	key, _ := f.cas.HistoryKey()
	if err := wire.VerifyHistory(h, key); err != nil {
		t.Errorf("history does not verify: %v", err)
	}
	h[0].Policy = "forged"
	if err := wire.VerifyHistory(h, key); err == nil {
		t.Error("a forged history verified")
	}
}

// A policy without owners is registered unsigned, once, and never
// changed: a manifest nobody can update.
func TestImmutablePolicy(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	ownerKey := "  keys:\n  - |\n" + indent(string(policy.MarshalPublicKey(&f.owner.PublicKey))) + "\n"
	immutable := strings.Replace(f.policyText(""), ownerKey, "  keys: []\n", 1)
	if immutable == f.policyText("") {
		t.Fatal("the fixture's owners were not removed")
	}
	r, err := f.register(immutable)
	if err != nil || r.Version != 1 {
		t.Fatalf("an owner-less policy approved by the board alone: %+v %v", r, err)
	}
	if r, err := f.register(immutable); err != nil || !r.Unchanged {
		t.Errorf("the same again: %+v %v", r, err)
	}
	changed := strings.Replace(immutable, "validity: 2h", "validity: 3h", 1)
	someone, _ := policy.NewKey()
	for _, signers := range [][]*ecdsa.PrivateKey{nil, {f.owner}, {someone}} {
		if _, err := f.register(changed, signers...); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "has no owners, so version 1 cannot be changed") {
			t.Errorf("update signed by %d keys: %v", len(signers), err)
		}
	}
	if cur, _ := f.cas.Policy("shop"); cur.Version != 1 || cur.Policy != immutable {
		t.Errorf("the immutable policy changed: version %d", cur.Version)
	}
}

func TestEncryptedPolicy(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	pub, _ := f.cas.EncryptionKey()
	casKey, _ := policy.DecodePublicKey(pub)
	s := &policy.Signed{Policy: f.policyText(""), Link: policy.Link{Version: 1}}
	for _, k := range []*ecdsa.PrivateKey{f.owner, f.rec[0]} { // its owner, and the board for its name
		if err := policy.Sign(s, k); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := policy.Encrypt(s, casKey)
	if r, err := f.cas.RegisterEncrypted(e, ""); err != nil || r.Name != "shop" {
		t.Fatalf("encrypted: %+v %v", r, err)
	}
	otherKey, _ := policy.NewEncryptionKey([]byte("another CAS, another key........"))
	e2, _ := policy.Encrypt(s, otherKey.PublicKey())
	if _, err := f.cas.RegisterEncrypted(e2, ""); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "sealed to key") {
		t.Errorf("sealed to another CAS: %v", err)
	}
}

// A restart without a sealer is recovery mode until k owners' shares
// arrive; then the same CAs, secrets and policies are back.
func TestRecovery(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 2, 3)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	before, _ := f.cas.Attest(f.request("api", nil))
	encKey, _ := f.cas.EncryptionKey()

	f.open(seal.NoSealer{})
	if st, why := f.cas.Status(); st != wire.RecoveryMode || !strings.Contains(why, "0 of 2 shares") {
		t.Fatalf("after restart: %s %q", st, why)
	}
	if _, err := f.cas.Attest(f.request("api", nil)); !errors.Is(err, ErrRecovery) {
		t.Errorf("attest in recovery mode: %v", err)
	}
	open := func(i int) seed.Share {
		sh, err := seed.OpenShare(f.shares.Shares[i].Sealed, f.rec[i])
		if err != nil {
			t.Fatal(err)
		}
		return sh
	}
	// A share opened with the right key but altered is refused.
	bad := open(0)
	bad.Value[3] ^= 1
	if _, err := f.cas.Recover(bad, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("altered share: %v", err)
	}
	if need, err := f.cas.Recover(open(2), nil); err != nil || need != 1 {
		t.Fatalf("first share: need %d, %v", need, err)
	}
	if st, _ := f.cas.Status(); st != wire.RecoveryMode {
		t.Fatalf("k-1 shares unlocked CAS: %s", st)
	}
	if need, err := f.cas.Recover(open(0), nil); err != nil || need != 0 {
		t.Fatalf("second share: need %d, %v", need, err)
	}
	if st, _ := f.cas.Status(); st != wire.Ready {
		t.Fatalf("after k shares: %s", st)
	}
	after, err := f.cas.Attest(f.request("api", nil))
	if err != nil {
		t.Fatal(err)
	}
	if after.RootCA != before.RootCA || after.MeshCA != before.MeshCA || after.Env["DB_KEY"] != before.Env["DB_KEY"] || after.Secrets["tls"]["Key"] != before.Secrets["tls"]["Key"] {
		t.Error("recovery changed the wire.CAs or the secrets")
	}
	if k, _ := f.cas.EncryptionKey(); k != encKey {
		t.Error("recovery changed the encryption key")
	}
}

// With the file sealer a restart unseals by itself.
func TestFileSealer(t *testing.T) {
	sealer := seal.FileSealer{Path: t.TempDir() + "/seed"}
	f := newFixture(t, sealer, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	f.open(sealer)
	if st, why := f.cas.Status(); st != wire.Ready {
		t.Fatalf("after restart with the file sealer: %s %q", st, why)
	}
	if _, err := f.cas.Attest(f.request("api", nil)); err != nil {
		t.Error(err)
	}
	if _, err := f.cas.Init([]*ecdsa.PublicKey{&f.owner.PublicKey}, 1, testToken); !errors.Is(err, ErrInitialized) {
		t.Errorf("second init: %v", err)
	}
	// The board is state too: after the restart a new name still needs it.
	other := strings.NewReplacer("name: shop", "name: other", "api.shop.svc, 10.1.2.3", "api.other.svc", "worker.shop.svc", "worker.other.svc").Replace(f.policyText(""))
	if _, err := f.registerAt(other, policy.Link{Version: 1}, f.owner); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "is a new name") {
		t.Errorf("a new name without the board after a restart: %v", err)
	}
}

// A state record that an attacker with the volume (or the API server's
// objects) puts back as it was before an update is refused at unlock: the
// restarted CAS stays in recovery, saying why, rather than serving the
// older policy.
func TestOlderRecordRefusedAtUnlock(t *testing.T) {
	sealer := seal.FileSealer{Path: t.TempDir() + "/seed"}
	f := newFixture(t, sealer, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	var old []byte
	if err := f.db.View(func(tx store.Tx) error {
		var err error
		old, err = tx.Get(bucketPolicies, "shop")
		return err
	}); err != nil || old == nil {
		t.Fatalf("reading the policy record: %v", err)
	}
	if _, err := f.register(strings.Replace(f.policyText(""), "validity: 2h", "validity: 3h", 1), f.owner); err != nil {
		t.Fatal(err)
	}
	if err := f.db.Update(func(tx store.Tx) error { return tx.Put(bucketPolicies, "shop", old) }); err != nil {
		t.Fatal(err)
	}
	f.open(sealer)
	st, why := f.cas.Status()
	if st != wire.RecoveryMode || !strings.Contains(why, "does not match its digest") {
		t.Fatalf("after an older copy of the policy record: %s %q", st, why)
	}
	if _, err := f.cas.Attest(f.request("api", nil)); !errors.Is(err, ErrRecovery) {
		t.Errorf("attestation on a rolled-back record: %v", err)
	}
}

// A replica in recovery adopts the seed of a ready peer: the same CAS,
// unlocked; another CAS's seed does not open it.
func TestAdoptSeed(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	s, err := f.cas.Seed()
	if err != nil {
		t.Fatal(err)
	}
	f.open(seal.NoSealer{})
	if st, _ := f.cas.Status(); st != wire.RecoveryMode {
		t.Fatalf("after a restart without a sealer: %s", st)
	}
	if _, err := f.cas.Seed(); !errors.Is(err, ErrRecovery) {
		t.Errorf("the seed of a CAS in recovery: %v", err)
	}
	other := newFixture(t, seal.NoSealer{}, 1, 1)
	wrong, _ := other.cas.Seed()
	if err := f.cas.Adopt(wrong); err == nil || !strings.Contains(err.Error(), "not this CAS's") {
		t.Errorf("another CAS's seed: %v", err)
	}
	if err := f.cas.Adopt(s); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cas.Attest(f.request("api", nil)); err != nil {
		t.Errorf("attestation after adopting the seed: %v", err)
	}
}

// A service pinned to an enclave's manifest attests: the manifest is in
// the PCRs the enclave extended (it alone since boot), the user data
// binds the CSR's key; another manifest before or after it is refused.
func TestAttestAnEnclaveByItsManifest(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	digest := strings.Repeat("5a", 32)
	text := strings.Replace(f.policyText(""), "  attestation: {identities: []}\n",
		"  attestation: {identities: [{type: nitro, pcrs: {0: \""+strings.Repeat("ab", 48)+"\"}, manifest: \""+digest+"\"}]}\n", 1)
	if _, err := f.register(text, f.owner); err != nil {
		t.Fatal(err)
	}
	enclave := func(manifests ...string) func(*attest.Claims) {
		return func(c *attest.Claims) {
			c.SGX, c.Nitro = nil, &attest.NitroIdentity{PCRs: map[int]attest.Bytes{0: []byte(strings.Repeat("\xab", 48))}}
			for i, m := range manifests {
				raw, _ := hex.DecodeString(m)
				c.Nitro.PCRs[attest.NitroManifestPCR+i] = attest.NitroExtend(nil, raw)
			}
		}
	}
	if _, err := f.attest(f.request("worker", enclave(digest))); err != nil {
		t.Errorf("the enclave that ran the pinned manifest alone: %v", err)
	}
	other := strings.Repeat("6b", 32)
	for name, edit := range map[string]func(*attest.Claims){
		"another manifest":          enclave(other),
		"a change taken back":       enclave(digest, other, digest),
		"another before the pinned": enclave(other, digest),
	} {
		if _, err := f.cas.Attest(f.request("worker", edit)); !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "the host changed what the enclave runs") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
