package policy

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrl "sigs.k8s.io/controller-runtime/pkg/reconcile"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	cascontroller "github.com/cloister-cc/cloister/internal/operator/controller/cas"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

// fixture: a real API server with a CAS resource whose "pod" is a real
// cloister-cas on loopback, and the reconcilers of both policy kinds.
type fixture struct {
	t       *testing.T
	c       client.Client
	admin   *casclient.Client // CAS directly, trusting its certificate
	signed  *Reconciler
	sealed  *Reconciler
	events  *testenv.Events
	owner   *ecdsa.PrivateKey
	address string
	ns      string // of the CAS resource and the policies
	// target is where the connector dials CAS; stop stops that CAS.
	target *string
	stop   func()
}

func newFixture(t *testing.T, ns string, initialise bool) *fixture {
	t.Helper()
	ctx := context.Background()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, casv1beta1.AddToScheme, servicesv1beta1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(envConfig, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	url, caFile, stop := castest.Start(t, state, "none")
	simPub := filepath.Join(state, cas.SimulationPubKeyFile)
	ca, _ := os.ReadFile(caFile)
	admin, err := casclient.New(url, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	if initialise {
		rec, _ := policy.NewKey()
		if _, err := admin.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, filepath.Dir(caFile)), castest.BoardPEM()); err != nil {
			t.Fatal(err)
		}
	}
	cas := &servicesv1beta1.CAS{ObjectMeta: metav1.ObjectMeta{Name: "cas", Namespace: ns}, Spec: servicesv1beta1.CASSpec{Simulation: true}}
	if err := c.Create(ctx, cas); err != nil {
		t.Fatal(err)
	}
	// The key CAS signs its simulated evidence with, as the operator
	// publishes the one it made.
	simKey, err := os.ReadFile(simPub)
	if err != nil {
		t.Fatal(err)
	}
	cas.Status.SimulationKey = string(simKey)
	if err := c.Status().Update(ctx, cas); err != nil {
		t.Fatal(err)
	}
	// On a node, as a running pod is: the connector refuses simulated ones.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + ns}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: conn.PodName("cas")},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "cas", Image: "cas"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(url, "https://")
	conn := &conn.Connector{Reader: c, Dial: func(string) casclient.DialFunc { return conn.DialTo(target) }}
	ev := &testenv.Events{}
	owner, _ := policy.NewKey()
	return &fixture{t: t, c: c, admin: admin, events: ev, owner: owner, address: "cas." + ns + ".svc:8081", ns: ns, target: &target, stop: stop,
		signed: &Reconciler{Client: c, Connector: conn, Recorder: ev, New: func() Object { return &casv1beta1.SignedPolicy{} }},
		sealed: &Reconciler{Client: c, Connector: conn, Recorder: ev, New: func() Object { return &casv1beta1.EncryptedPolicy{} }},
	}
}

// doc is policy NS/shop, the name a policy resource of namespace NS may
// register.
func (f *fixture) doc(validity string) string {
	return `version: cloister.dev/policy/v1
name: ` + f.ns + `/shop
owners:
  keys:
  - |
    ` + strings.ReplaceAll(strings.TrimSpace(string(policy.MarshalPublicKey(&f.owner.PublicKey))), "\n", "\n    ") + `
allowSimulation: true
services:
- name: web
  attestation: {identities: []}
  certificate: {sans: [web.shop.svc], validity: ` + validity + `}
`
}

func (f *fixture) sign(doc string, keys ...*ecdsa.PrivateKey) *policy.Signed {
	f.t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		f.t.Fatal(err)
	}
	s := &policy.Signed{Policy: doc}
	s.Link, err = f.admin.LinkFor(context.Background(), d.Name, d.Digest())
	var apiErr *casclient.APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable {
		s.Link, err = policy.Link{Version: 1}, nil // CAS is not initialised yet: a new policy
	}
	if err != nil {
		f.t.Fatal(err)
	}
	if s.Version == 1 {
		keys = append(keys, castest.BoardKey()) // a new name: the board approves it
	}
	for _, k := range keys {
		if err := policy.Sign(s, k); err != nil {
			f.t.Fatal(err)
		}
	}
	return s
}

// apply creates a SignedPolicy and reconciles it once.
func (f *fixture) apply(name, ns string, s *policy.Signed, casAddress string) *casv1beta1.SignedPolicy {
	f.t.Helper()
	sp := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: casv1beta1.SignedPolicySpec{CASAddress: casAddress, Policy: s.Policy, Version: s.Version, Predecessor: s.Predecessor}}
	for _, sig := range s.Signatures {
		sp.Spec.Signatures = append(sp.Spec.Signatures, casv1beta1.Signature{Signer: sig.Signer, Signature: sig.Signature})
	}
	if err := f.c.Create(context.Background(), sp); err != nil {
		f.t.Fatal(err)
	}
	f.reconcile(f.signed, sp)
	return sp
}

func (f *fixture) reconcile(r *Reconciler, obj Object) ctrl.Result {
	f.t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		f.t.Fatal(err)
	}
	return res
}

func (f *fixture) history() []string {
	f.t.Helper()
	h, err := f.admin.History(context.Background(), f.ns+"/shop")
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, r := range h.Records {
		out = append(out, r.Digest)
	}
	return out
}

func cond(st *casv1beta1.PolicyStatus) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == string(health.Registered) {
			return c
		}
	}
	return metav1.Condition{}
}

// A version, its successor signed by the owner, and one signed by a
// stranger: HEALTHY with hash and revision, HEALTHY with the first as
// predecessor, UNHEALTHY with CAS's reason and CAS's policy unchanged.
func TestSignedPolicyVersions(t *testing.T) {
	f := newFixture(t, "versions", true)
	v1 := f.apply("shop-v1", "versions", f.sign(f.doc("1h"), f.owner), f.address)
	h := f.history()
	if v1.Status.State != common.StateHealthy || v1.Status.PolicyName != "versions/shop" || v1.Status.Revision != 1 ||
		len(h) != 1 || v1.Status.Hash != h[0] || v1.Status.Predecessor != "" {
		t.Fatalf("v1: %+v (history %v)", v1.Status, h)
	}
	if got := f.events.All(); len(got) != 1 || got[0].Type != "Normal" || got[0].Reason != "Registered" {
		t.Errorf("events %v", got)
	}
	// Registered once: another pass asks CAS nothing and writes nothing,
	// until it is time to check CAS still holds it.
	rv := v1.ResourceVersion
	if res := f.reconcile(f.signed, v1); res.RequeueAfter <= 0 || res.RequeueAfter > recheckEvery || v1.ResourceVersion != rv {
		t.Errorf("a registered policy was handled again: %+v, resourceVersion %s -> %s", res, rv, v1.ResourceVersion)
	}

	v2 := f.apply("shop-v2", "versions", f.sign(f.doc("2h"), f.owner), f.address)
	h = f.history()
	if v2.Status.State != common.StateHealthy || v2.Status.Revision != 2 || v2.Status.Predecessor != v1.Status.Hash || v2.Status.Hash != h[1] {
		t.Fatalf("v2: %+v (history %v)", v2.Status, h)
	}

	stranger, _ := policy.NewKey()
	v3 := f.apply("shop-v3", "versions", f.sign(f.doc("3h"), stranger), f.address)
	c := cond(&v3.Status)
	if v3.Status.State != common.StateUnhealthy || c.Reason != string(health.ReasonPolicyRefused) || !strings.Contains(c.Message, "unauthorized") {
		t.Errorf("v3 by a stranger: %+v", v3.Status)
	}
	if now := f.history(); len(now) != 2 {
		t.Errorf("a refused version changed CAS's history: %v", now)
	}
	if got := f.events.All(); got[len(got)-1].Type != "Warning" || got[len(got)-1].Reason != "Refused" {
		t.Errorf("events %v", got)
	}
	// A copy of the current version signed by a stranger claims an
	// approval its signer could not give: refused, not "unchanged".
	copied := f.apply("shop-v2-copy", "versions", f.sign(f.doc("2h"), stranger), f.address)
	if c := cond(&copied.Status); copied.Status.State != common.StateUnhealthy || c.Reason != string(health.ReasonPolicyRefused) {
		t.Errorf("a stranger's copy of v2: %+v", copied.Status)
	}
}

// An operator that crashed after CAS registered the policy but before it
// wrote the status finds the version in CAS's history: registered once.
func TestRegisteredOnceAfterACrash(t *testing.T) {
	f := newFixture(t, "crash", true)
	s := f.sign(f.doc("1h"), f.owner)
	if _, err := f.admin.RegisterPolicy(context.Background(), apiRequest(s)); err != nil {
		t.Fatal(err)
	}
	// A later version exists too: re-registering the first would roll CAS
	// back to it.
	if _, err := f.admin.RegisterPolicy(context.Background(), apiRequest(f.sign(f.doc("2h"), f.owner))); err != nil {
		t.Fatal(err)
	}
	before := f.history()
	sp := f.apply("shop", "crash", s, f.address)
	if sp.Status.State != common.StateHealthy || sp.Status.Revision != 1 || sp.Status.Hash != before[0] || cond(&sp.Status).Reason != string(health.ReasonPolicySuperseded) {
		t.Errorf("status %+v", sp.Status)
	}
	if after := f.history(); len(after) != 2 {
		t.Errorf("registered again: history %v -> %v", before, after)
	}
}

func apiRequest(s *policy.Signed) wire.PolicyRequest {
	return wire.PolicyRequest{Policy: s.Policy, Link: s.Link, Signatures: s.Signatures}
}

// PENDING while CAS cannot take the policy, with backoff; UNHEALTHY when
// the address names no CAS resource's Service.
func TestPendingAndAddresses(t *testing.T) {
	f := newFixture(t, "waiting", false)
	sp := f.apply("shop", "waiting", f.sign(f.doc("1h"), f.owner), f.address)
	c := cond(&sp.Status)
	if sp.Status.State != common.StatePending || c.Reason != string(health.ReasonCASNotReady) || !strings.Contains(c.Message, "uninitialized") {
		t.Errorf("CAS not initialised: %+v", sp.Status)
	}
	first := f.reconcile(f.signed, sp).RequeueAfter
	second := f.reconcile(f.signed, sp).RequeueAfter
	if first <= 0 || second <= first {
		t.Errorf("retries after %s then %s: want a growing backoff", first, second)
	}

	missing := f.apply("elsewhere", "waiting", f.sign(f.doc("1h"), f.owner), "nope.waiting.svc:8081")
	if c := cond(&missing.Status); missing.Status.State != common.StatePending || c.Reason != string(health.ReasonCASAddress) || !strings.Contains(c.Message, "no CAS resource waiting/nope") {
		t.Errorf("no such CAS: %+v", missing.Status)
	}
	bad := f.apply("bad", "waiting", f.sign(f.doc("1h"), f.owner), "cas:8081")
	if c := cond(&bad.Status); bad.Status.State != common.StateUnhealthy || c.Reason != string(health.ReasonCASAddress) {
		t.Errorf("an address that is no CAS resource: %+v", bad.Status)
	}
}

// A policy sealed to another CAS's key is refused naming the key.
func TestEncryptedPolicySealedElsewhere(t *testing.T) {
	f := newFixture(t, "sealed", true)
	other, err := policy.NewEncryptionKey(randomBytes(t))
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.Encrypt(f.sign(f.doc("1h"), f.owner), other.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	ep := &casv1beta1.EncryptedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "sealed"},
		Spec: casv1beta1.EncryptedPolicySpec{CASAddress: f.address, Policy: e.Policy, EncryptionKey: e.EncryptionKey}}
	if err := f.c.Create(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	f.reconcile(f.sealed, ep)
	if c := cond(&ep.Status); ep.Status.State != common.StateUnhealthy || c.Reason != string(health.ReasonPolicyRefused) || !strings.Contains(c.Message, "sealed to key") {
		t.Errorf("sealed to another CAS: %+v", ep.Status)
	}

	pk, err := f.admin.PublicKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mine, err := policy.DecodePublicKey(pk.EncryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	e, _ = policy.Encrypt(f.sign(f.doc("1h"), f.owner), mine)
	ok := &casv1beta1.EncryptedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shop-ok", Namespace: "sealed"},
		Spec: casv1beta1.EncryptedPolicySpec{CASAddress: f.address, Policy: e.Policy, EncryptionKey: e.EncryptionKey}}
	if err := f.c.Create(context.Background(), ok); err != nil {
		t.Fatal(err)
	}
	f.reconcile(f.sealed, ok)
	if ok.Status.State != common.StateHealthy || ok.Status.PolicyName != "sealed/shop" || ok.Status.Revision != 1 || ok.Status.Hash == "" {
		t.Errorf("sealed to this CAS: %+v", ok.Status)
	}
}

// A tenant's resources register only its names: a SignedPolicy named
// outside its namespace is refused before CAS is asked, an EncryptedPolicy
// (whose name only CAS reads) by CAS; CAS holds neither.
func TestPoliciesOnlyWithinTheirNamespace(t *testing.T) {
	f := newFixture(t, "tenant", true)
	theirs := strings.Replace(f.doc("1h"), "name: tenant/shop", "name: bank/shop", 1)
	sp := f.apply("bank-shop", "tenant", f.sign(theirs, f.owner), f.address)
	if c := cond(&sp.Status); sp.Status.State != common.StateUnhealthy || c.Reason != string(health.ReasonPolicyNamespace) ||
		!strings.Contains(c.Message, "the policy is named bank/shop, outside namespace tenant") {
		t.Errorf("a SignedPolicy named in another namespace: %+v", sp.Status)
	}
	top := f.apply("top", "tenant", f.sign(strings.Replace(f.doc("1h"), "name: tenant/shop", "name: shop", 1), f.owner), f.address)
	if c := cond(&top.Status); top.Status.State != common.StateUnhealthy || c.Reason != string(health.ReasonPolicyNamespace) {
		t.Errorf("a SignedPolicy of no namespace: %+v", top.Status)
	}

	pk, err := f.admin.PublicKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := policy.DecodePublicKey(pk.EncryptionKey)
	e, _ := policy.Encrypt(f.sign(theirs, f.owner), mine)
	ep := &casv1beta1.EncryptedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bank-shop", Namespace: "tenant"},
		Spec: casv1beta1.EncryptedPolicySpec{CASAddress: f.address, Policy: e.Policy, EncryptionKey: e.EncryptionKey}}
	if err := f.c.Create(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	f.reconcile(f.sealed, ep)
	if c := cond(&ep.Status); ep.Status.State != common.StateUnhealthy || c.Reason != string(health.ReasonPolicyRefused) ||
		!strings.Contains(c.Message, "policy bank/shop is not named within namespace tenant") {
		t.Errorf("an EncryptedPolicy named in another namespace: %+v", ep.Status)
	}
	for _, name := range []string{"bank/shop", "shop"} {
		if _, err := f.admin.History(context.Background(), name); err == nil {
			t.Errorf("CAS holds %s", name)
		}
	}
}

func randomBytes(t *testing.T) []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// rootCA is the fingerprint of the root CA of the CAS admin reaches.
func rootCA(t *testing.T, admin *casclient.Client) string {
	t.Helper()
	cas, err := admin.CAs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fp, err := cascontroller.RootCAFingerprint(cas.RootCA)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// setCASStatus writes what the operator would read from CAS into the CAS
// resource's status.
func (f *fixture) setCASStatus(edit func(*servicesv1beta1.CASStatus)) {
	f.t.Helper()
	res := &servicesv1beta1.CAS{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "cas"}, res); err != nil {
		f.t.Fatal(err)
	}
	edit(&res.Status)
	if err := f.c.Status().Update(context.Background(), res); err != nil {
		f.t.Fatal(err)
	}
}

// A registered policy follows its CAS: when CAS loses its state and is
// initialised again (another root CA), the policy leaves HEALTHY while the
// new CAS cannot take it, and is registered with it once it can. A pass
// that sends the registration again to a CAS that holds it changes
// nothing there.
func TestPolicyFollowsAResetCAS(t *testing.T) {
	f := newFixture(t, "reset", true)
	first := rootCA(t, f.admin)
	f.setCASStatus(func(st *servicesv1beta1.CASStatus) { st.CASState, st.RootCA = string(wire.Ready), first })
	sp := f.apply("shop", "reset", f.sign(f.doc("1h"), f.owner), f.address)
	if sp.Status.State != common.StateHealthy || sp.Status.CASRootCA != first {
		t.Fatalf("registered: %+v, want HEALTHY with CAS's root CA %s", sp.Status, first)
	}
	// Sent again (as after recheckEvery, or an operator restart): CAS
	// holds it, and its history is unchanged.
	f.signed.checked = nil
	if f.reconcile(f.signed, sp); sp.Status.State != common.StateHealthy || len(f.history()) != 1 {
		t.Fatalf("sent again: %+v, history %v", sp.Status, f.history())
	}

	// CAS loses its state: a new, uninitialised CAS, whose status the
	// operator has read.
	f.stop()
	state := t.TempDir()
	url, caFile, _ := castest.Start(t, state, "none")
	*f.target = strings.TrimPrefix(url, "https://")
	ca, _ := os.ReadFile(caFile)
	admin, err := casclient.New(url, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.admin = admin
	simKey, err := os.ReadFile(filepath.Join(state, cas.SimulationPubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	f.setCASStatus(func(st *servicesv1beta1.CASStatus) {
		st.CASState, st.RootCA, st.SimulationKey = string(wire.Uninitialized), "", string(simKey)
	})
	f.reconcile(f.signed, sp)
	if c := cond(&sp.Status); sp.Status.State != common.StatePending || c.Reason != string(health.ReasonCASNotReady) {
		t.Fatalf("against an uninitialised CAS: %+v, want PENDING", sp.Status)
	}

	// Initialised again: registered with the new CAS.
	rec, _ := policy.NewKey()
	if _, err := admin.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, filepath.Dir(caFile)), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	second := rootCA(t, admin)
	f.setCASStatus(func(st *servicesv1beta1.CASStatus) { st.CASState, st.RootCA = string(wire.Ready), second })
	f.reconcile(f.signed, sp)
	if c := cond(&sp.Status); sp.Status.State != common.StateHealthy || sp.Status.CASRootCA != second || !strings.Contains(c.Message, "registered again") {
		t.Fatalf("after the new init: %+v", sp.Status)
	}
	if h := f.history(); len(h) != 1 || h[0] != sp.Status.Hash {
		t.Errorf("the new CAS's history %v, want the policy once", h)
	}
}
