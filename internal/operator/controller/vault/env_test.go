package vault

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/controller/controllertest"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

const (
	simClass    = "cloister-cc-sim-v1"
	vaultImage  = "registry.example/vault@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	initializer = "registry.example/cloister-initializer@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// replicas plays what the operator reads of the replicas.
type replicas struct {
	mu sync.Mutex
	rs []Replica
}

func (p *replicas) set(rs ...Replica) { p.mu.Lock(); p.rs = rs; p.mu.Unlock() }
func (p *replicas) get(context.Context, *servicesv1beta1.Vault) []Replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.rs)
}

// Against a real API server (no kubelet: the test plays what the
// replicas answer): a Vault becomes a StatefulSet of confidential pods
// (runtime class, the initializer first, the pod policy), the policy its
// owners sign is published with the pods' identity, and the status
// engine's rows of a Vault reach its status: PENDING while it starts,
// HEALTHY with three unsealed replicas in one quorum, UNHEALTHY with the
// seal's failure named within one pass.
func TestVaultStatusFromItsReplicas(t *testing.T) {
	ctx := context.Background()
	e := controllertest.New(t, envConfig, "vault-env", appsv1.AddToScheme, policyv1.AddToScheme, basev1beta1.AddToScheme, servicesv1beta1.AddToScheme)
	c := e.Client
	data, err := charts.Load("vault")
	if err != nil {
		t.Fatal(err)
	}
	played := &replicas{}
	k := &Kind{Base: service.Base{Reader: c, ChartData: data}, Writer: c, Renew: true, InitializerImage: initializer, Replicas: played.get}
	r := &service.Reconciler{Client: c, Reader: c, Scheme: e.Scheme, Releases: e.Releases, Recorder: e.Events,
		Metrics: metrics.NewRecorder(prometheus.NewRegistry()), OperatorNamespace: "cloister-system", Kind: k}

	// The sim runtime class and a simulated CAS that published its key.
	rt := controllertest.ConfidentialRuntime("sim", "sim")
	if err := c.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	rt.Status.RuntimeClassName = simClass
	if err := c.Status().Update(ctx, rt); err != nil {
		t.Fatal(err)
	}
	casKey, _ := policy.NewKey()
	cas := &servicesv1beta1.CAS{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: "cas"}, Spec: servicesv1beta1.CASSpec{Simulation: true}}
	if err := c.Create(ctx, cas); err != nil {
		t.Fatal(err)
	}
	cas.Status.SimulationKey = string(policy.MarshalPublicKey(&casKey.PublicKey))
	if err := c.Status().Update(ctx, cas); err != nil {
		t.Fatal(err)
	}

	v := testVault(t)
	owner, _ := policy.NewKey()
	v.Spec.Policy.Owners = []string{string(policy.MarshalPublicKey(&owner.PublicKey))}
	v.Namespace = e.Namespace
	v.Spec.Image = vaultImage
	v.Spec.RuntimeClassName = simClass
	if err := c.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	reconcile := func(passes int) {
		t.Helper()
		if err := e.Reconcile(r, v, passes); err != nil {
			t.Logf("reconcile: %v", err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
			t.Fatal(err)
		}
	}
	cond := func(typ health.ConditionType) metav1.Condition {
		for _, c := range v.Status.Conditions {
			if c.Type == string(typ) {
				return c
			}
		}
		t.Fatalf("no condition %s in %v", typ, v.Status.Conditions)
		return metav1.Condition{}
	}

	played.set(Replica{Name: "secrets-0"}, Replica{Name: "secrets-1"}, Replica{Name: "secrets-2"})
	reconcile(4)

	// The pods: confidential as generate makes them.
	var ss appsv1.StatefulSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: "secrets"}, &ss); err != nil {
		t.Fatalf("the StatefulSet: %v (status %+v)", err, v.Status.Conditions)
	}
	pod := ss.Spec.Template
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != simClass || *ss.Spec.Replicas != 3 {
		t.Errorf("runtime class %v, replicas %d", pod.Spec.RuntimeClassName, *ss.Spec.Replicas)
	}
	if len(pod.Spec.InitContainers) == 0 || pod.Spec.InitContainers[0].Image != initializer {
		t.Fatalf("init containers %+v, want the initializer first", pod.Spec.InitContainers)
	}
	env := map[string]string{}
	for _, ev := range pod.Spec.InitContainers[0].Env {
		env[ev.Name] = ev.Value
	}
	svc, _ := ServiceName(v)
	if env[initenv.EnvPolicy] != "vault-env/secrets" || env[initenv.EnvService] != svc || env[initenv.EnvCAS] != "cas.vault-env.svc:8081" ||
		env[initenv.EnvCASSimKey] != cas.Status.SimulationKey || env[initenv.EnvPolicyOwners] == "" || env[initenv.EnvPolicyOwnerThreshold] != "1" {
		t.Errorf("the initializer's environment %v", env)
	}
	// The bootstrap beside Vault: the initializer's image, the owners
	// its recovery keys are sealed to, the first replica named.
	var boot *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "bootstrap" {
			boot = &pod.Spec.Containers[i]
		}
	}
	if boot == nil || boot.Image != initializer {
		t.Fatalf("no bootstrap sidecar of the initializer's image in %+v", pod.Spec.Containers)
	}
	benv := map[string]string{}
	for _, ev := range boot.Env {
		benv[ev.Name] = ev.Value
	}
	if owners := vaultinit.ParseOwners(benv[vaultinit.EnvOwners]); len(owners) != 1 || owners[0] != v.Spec.Policy.Owners[0] ||
		benv[vaultinit.EnvFirst] != "secrets-0" || benv[vaultinit.EnvVault] != "vault-env/secrets" || benv[vaultinit.EnvThreshold] != "1" {
		t.Errorf("the bootstrap's environment %v", benv)
	}
	_, digest, err := podpolicy.FromAnnotation(pod.Annotations[podpolicy.Annotation])
	if err != nil {
		t.Fatalf("the pod policy: %v", err)
	}

	// The policy, published unsigned, names the pods by that policy.
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: PolicyConfigMap("secrets")}, &cm); err != nil {
		t.Fatalf("the policy's ConfigMap: %v", err)
	}
	doc, err := policy.Parse([]byte(cm.Data[PolicyItem]))
	if err != nil {
		t.Fatalf("the published policy: %v", err)
	}
	ids := doc.Service(svc).Attestation.Identities
	if len(ids) != 1 || ids[0].Type != attest.Sim || ids[0].HostData.String() != digest {
		t.Errorf("identities %+v, want the pod policy %s", ids, digest)
	}
	if v.Status.PolicyDigest != doc.Digest() || v.Status.Policy != "vault-env/secrets" || v.Status.PolicyConfigMap != cm.Name {
		t.Errorf("status policy %s %s %s, want %s", v.Status.Policy, v.Status.PolicyConfigMap, v.Status.PolicyDigest, doc.Digest())
	}
	// The owners make the same policy from the spec, not from the
	// operator's word.
	own, err := Render(ctx, c, v, initializer)
	if err != nil || own.Digest() != v.Status.PolicyDigest {
		t.Errorf("the policy made from the spec: %v, digest %v, the operator's %s", err, own, v.Status.PolicyDigest)
	}
	if other, err := Render(ctx, c, v, "registry.example/other-initializer@sha256:"+strings.Repeat("3", 64)); err != nil || other.Digest() == v.Status.PolicyDigest {
		t.Errorf("another initializer gives the same policy: %v", err)
	}

	// The StatefulSet controller's part: the pods run, none ready (sealed).
	rollout := func(ready int32) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(&ss), &ss); err != nil {
			t.Fatal(err)
		}
		ss.Status = appsv1.StatefulSetStatus{ObservedGeneration: ss.Generation, Replicas: 3, ReadyReplicas: ready, UpdatedReplicas: 3, AvailableReplicas: ready}
		if err := c.Status().Update(ctx, &ss); err != nil {
			t.Fatal(err)
		}
	}
	rollout(0)
	reconcile(1)

	// Starting: PENDING (not UNHEALTHY for pods that are sealed), the
	// Vault's rows shown.
	if v.Status.State != common.StatePending || cond(health.IsHealthy).Reason != string(health.ReasonVaultStarting) ||
		cond(health.VaultAttested).Status != health.Unknown || cond(health.VaultUnsealed).Status != health.False {
		t.Errorf("starting: %s %+v", v.Status.State, v.Status.Conditions)
	}

	// Three unsealed replicas agreeing on one leader: HEALTHY; the first
	// one's recovery keys, sealed to the owners, kept in a Secret.
	bundle, err := vaultinit.SealRecovery("vault-env/secrets", [][]byte{[]byte("recovery-key-0")}, v.Spec.Policy.Owners, 1)
	if err != nil {
		t.Fatal(err)
	}
	sealed, _ := json.Marshal(bundle)
	played.set(Replica{Name: "secrets-0", Health: unsealed("secrets-0", true), Recovery: sealed},
		Replica{Name: "secrets-1", Health: unsealed("secrets-0", false)}, Replica{Name: "secrets-2", Health: unsealed("secrets-0", false)})
	rollout(3)
	reconcile(1)
	if v.Status.State != common.StateHealthy || v.Status.ReadyReplicas != 3 || v.Status.Leader != "secrets-0" || v.Status.VaultSealedAlert != 0 ||
		v.Status.InitializedAt == nil || cond(health.VaultQuorum).Status != health.True || cond(health.VaultAttested).Status != health.True {
		t.Errorf("unsealed: %s ready %d leader %q %+v", v.Status.State, v.Status.ReadyReplicas, v.Status.Leader, v.Status.Conditions)
	}
	var sec corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: RecoverySecret("secrets")}, &sec); err != nil || v.Status.RecoveryKeysSecret != sec.Name {
		t.Fatalf("the recovery keys' Secret: %v (status %q)", err, v.Status.RecoveryKeysSecret)
	}
	kept, err := vaultinit.ParseBundle(sec.Data[RecoveryItem])
	if err != nil {
		t.Fatal(err)
	}
	if key, err := kept.Open(owner); err != nil || string(key) != "recovery-key-0" {
		t.Errorf("the owner's recovery key: %q %v", key, err)
	}
	if strings.Contains(string(sec.Data[RecoveryItem]), "recovery-key-0") {
		t.Error("a recovery key in plain text in the Secret")
	}

	// A replica's certificate from CAS with a third of its lifetime left:
	// its pod is replaced, to start again with a new one; the others are
	// left alone, and none goes while one is away.
	pods := map[string]*corev1.Pod{}
	for _, name := range []string{"secrets-0", "secrets-1", "secrets-2"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: name, Labels: ss.Spec.Selector.MatchLabels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ContainerName, Image: vaultImage}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		pods[name] = p
	}
	if got := ss.Spec.Template.Labels[common.LabelManagedBy]; got != common.ManagedByOperator {
		t.Errorf("the pods' label %s=%q: the admission policy lets the operator delete only its own", common.LabelManagedBy, got)
	}
	now := time.Now()
	withCert := func(h *Health, ago time.Duration) *Health {
		h.NotBefore, h.NotAfter = now.Add(-ago), now.Add(-ago+24*time.Hour)
		return h
	}
	exists := func(name string) bool {
		return c.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: name}, &corev1.Pod{}) == nil
	}
	played.set(Replica{Name: "secrets-0", Pod: pods["secrets-0"], Health: withCert(unsealed("secrets-0", true), time.Hour)},
		Replica{Name: "secrets-1", Pod: pods["secrets-1"], Health: withCert(unsealed("secrets-0", false), 20*time.Hour)},
		Replica{Name: "secrets-2", Pod: pods["secrets-2"], Health: withCert(unsealed("secrets-0", false), 2*time.Hour)})
	reconcile(1)
	if exists("secrets-1") || !exists("secrets-0") || !exists("secrets-2") || v.Status.State != common.StateHealthy {
		t.Errorf("after renewal: secrets-0 %v, secrets-1 %v (due), secrets-2 %v; %s", exists("secrets-0"), exists("secrets-1"), exists("secrets-2"), v.Status.State)
	}
	// secrets-1 away (restarting), secrets-2 due too: it waits.
	played.set(Replica{Name: "secrets-0", Pod: pods["secrets-0"], Health: withCert(unsealed("secrets-0", true), time.Hour)},
		Replica{Name: "secrets-1"},
		Replica{Name: "secrets-2", Pod: pods["secrets-2"], Health: withCert(unsealed("secrets-0", false), 20*time.Hour)})
	reconcile(1)
	if !exists("secrets-2") {
		t.Error("a second replica replaced while the first was away")
	}

	// A replica whose seal CAS refuses: UNHEALTHY in one pass, naming it.
	played.set(Replica{Name: "secrets-0", Health: unsealed("secrets-0", true)},
		Replica{Name: "secrets-1", Health: unsealed("secrets-0", false)}, Replica{Name: "secrets-2", Pod: crashed(sealRefused)})
	rollout(2)
	reconcile(1)
	if h := cond(health.IsHealthy); v.Status.State != common.StateUnhealthy || h.Reason != string(health.ReasonSealRefused) ||
		!strings.Contains(h.Message, "secrets-2") || strings.Contains(h.Message, "Code: 403") || v.Status.VaultSealedAlert != 1 {
		t.Errorf("a refused seal: %s %+v alert %d", v.Status.State, h, v.Status.VaultSealedAlert)
	}
}
