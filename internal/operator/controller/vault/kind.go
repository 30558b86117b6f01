// Package vault is the Vault controller: the shared service reconciler
// with the Vault chart (a StatefulSet of confidential pods with raft
// storage on claims, made confidential as cloister generate makes a
// workload: its runtime class, the initializer, the pod policy), the CAS
// policy its owners sign (published, never signed, by the operator), and
// a status read from each replica's own API over TLS that only CAS's
// certificate for the Vault's service passes.
package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	sigsyaml "sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/workload/generate"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// ContainerName is the Vault server's container in each pod.
const ContainerName = "vault"

// ReleasePrefix names a Vault's release: cloister-vault-NAME.
const ReleasePrefix = "cloister-vault"

// DefaultMemory is a replica's memory limit unless spec.resources sets
// one: its confidential VM gets exactly that.
const DefaultMemory = "512Mi"

// Kind adapts Vault to the service reconciler.
type Kind struct {
	service.Base
	// Writer publishes the Vault's policy for its owners (a ConfigMap).
	Writer client.Writer
	// InitializerImage attests the Vault's pods to CAS (pinned).
	InitializerImage string
	// CASDial, when set, replaces dialling the CAS pod's address (tests
	// run CAS on loopback).
	CASDial func(podAddress string) casclient.DialFunc
	// Replicas, when set, replaces reading CAS's root CA and the
	// replicas (the status engine's tests play them).
	Replicas func(ctx context.Context, v *servicesv1beta1.Vault) []Replica
	// Renew replaces (deletes) a replica whose certificate is due for
	// renewal; off, none is.
	Renew bool
	// Now is the clock renewals are judged by (time.Now when nil).
	Now func() time.Time
	// observed holds, per Vault (by UID), the conditions FillStatus
	// judged, until Conditions takes them.
	observed sync.Map
}

var (
	_ service.Kind           = (*Kind)(nil)
	_ service.Poller         = (*Kind)(nil)
	_ service.PostRenderer   = (*Kind)(nil)
	_ service.Conditioner    = (*Kind)(nil)
	_ service.ReadinessJudge = (*Kind)(nil)
)

// How often the replicas are read besides the watches: a sealed replica
// changes nothing the watches see.
const (
	pollWaiting = 10 * time.Second
	pollHealthy = time.Minute
	// readTimeout bounds what one status pass reads of CAS and resources.
	readTimeout = 5 * time.Second
)

func (k *Kind) Name() string                       { return "Vault" }
func (k *Kind) ReleasePrefix() string              { return ReleasePrefix }
func (k *Kind) New() service.Object                { return &servicesv1beta1.Vault{} }
func as(obj service.Object) *servicesv1beta1.Vault { return obj.(*servicesv1beta1.Vault) }

// NoAutoUpdate: a new image is a new pod policy, which the owners sign.
func (k *Kind) NoAutoUpdate() {}

// ReadinessJudge: a replica is not ready while sealed, which the Vault's
// own rows tell (PENDING), and its IsHealthy names a seal's failure.
func (k *Kind) ReadinessJudge() {}

// Confidential is what makes the Vault's pods confidential, computed from
// its CAS and runtime class: the options cloister generate would take.
// It travels in the release's values, so a revision replays it.
type Confidential struct {
	Platform         runtimeclass.Platform `json:"platform"`
	RuntimeClass     string                `json:"runtimeClass"`
	InitializerImage string                `json:"initializerImage"`
	// CAS is the CAS's Service address (HOST:PORT), Expect the evidence
	// the initializer demands of it (JSON), SimKey a simulated CAS's key.
	CAS    string `json:"cas"`
	Expect string `json:"casExpect"`
	SimKey string `json:"casSimKey,omitempty"`
	// Policy and its owners, as the initializer pins them.
	Policy         string `json:"policy"`
	Owners         string `json:"policyOwners"`
	OwnerThreshold string `json:"policyOwnerThreshold"`
}

// casOf is the CAS resource the Vault names.
func (k *Kind) casOf(ctx context.Context, v *servicesv1beta1.Vault) (*servicesv1beta1.CAS, error) {
	var cas servicesv1beta1.CAS
	if err := k.Reader.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: v.Spec.CAS.Name}, &cas); err != nil {
		return nil, fmt.Errorf("spec.cas.name: CAS %s/%s: %w", v.Namespace, v.Spec.CAS.Name, err)
	}
	return &cas, nil
}

// confidential reads the Vault's CAS and runtime class into what its pods
// need; an error says what is missing and its fix.
func (k *Kind) confidential(ctx context.Context, v *servicesv1beta1.Vault) (*Confidential, error) {
	cas, err := k.casOf(ctx, v)
	if err != nil {
		return nil, err
	}
	return k.confidentialOf(ctx, v, cas)
}

// confidentialOf is confidential with the CAS resource already read.
func (k *Kind) confidentialOf(ctx context.Context, v *servicesv1beta1.Vault, cas *servicesv1beta1.CAS) (*Confidential, error) {
	platform, err := k.platform(ctx, v.Spec.RuntimeClassName)
	if err != nil {
		return nil, err
	}
	sim := platform == runtimeclass.Sim
	switch {
	case sim != cas.Spec.Simulation:
		return nil, fmt.Errorf("spec.runtimeClassName %s is of platform %s and CAS %s is simulated: %v; simulated pods attest only to a simulated CAS, pods in a TEE only to a CAS in one",
			v.Spec.RuntimeClassName, platform, cas.Name, cas.Spec.Simulation)
	case sim && cas.Status.SimulationKey == "":
		return nil, fmt.Errorf("waiting for CAS %s to publish its simulation key (status.simulationKey), which the initializer pins", cas.Name)
	case cas.Spec.ConfidentialVM != nil && cas.Status.HostData == "":
		return nil, fmt.Errorf("waiting for CAS %s to publish its host data (status.hostData), which the initializer pins", cas.Name)
	}
	expect, err := json.Marshal(conn.Expect(cas).Policy)
	if err != nil {
		return nil, err
	}
	owners, err := generate.PinnedOwners(v.Spec.Policy.Owners)
	if err != nil {
		return nil, fmt.Errorf("spec.policy.owners: %w: give PEM P-256 public keys (cloister policy keygen)", err)
	}
	threshold := generate.Manifest{OwnerKeys: v.Spec.Policy.Owners}.OwnerThreshold()
	ref := conn.Ref{Namespace: cas.Namespace, Name: cas.Name, Port: int(cas.Spec.Service.ClientPort)}
	if ref.Port == 0 {
		ref.Port = servicesv1beta1.DefaultClientPort
	}
	c := &Confidential{
		Platform: platform, RuntimeClass: v.Spec.RuntimeClassName, InitializerImage: k.InitializerImage,
		CAS: fmt.Sprintf("%s.%s.svc:%d", ref.Name, ref.Namespace, ref.Port), Expect: string(expect),
		Policy: PolicyName(v), Owners: owners, OwnerThreshold: strconv.Itoa(threshold),
	}
	if sim {
		c.SimKey = cas.Status.SimulationKey
	}
	return c, nil
}

// platform is the platform of the ConfidentialRuntime that installs the
// runtime class.
func (k *Kind) platform(ctx context.Context, class string) (runtimeclass.Platform, error) {
	var list basev1beta1.ConfidentialRuntimeList
	if err := k.Reader.List(ctx, &list); err != nil {
		return "", fmt.Errorf("listing ConfidentialRuntimes: %w", err)
	}
	for _, r := range list.Items {
		if r.Status.RuntimeClassName == class {
			return runtimeclass.ParsePlatform(r.Spec.Platform)
		}
	}
	return "", fmt.Errorf("spec.runtimeClassName: no ConfidentialRuntime installs runtime class %q (kubectl get ccr shows their status.runtimeClassName)", class)
}

// Release places the Vault in its namespace, its Service named as the CR.
func (k *Kind) Release(obj service.Object, _ string) (string, map[string]any, error) {
	v := as(obj)
	spec := *v.Spec.ServiceSpec.DeepCopy()
	if _, ok := spec.Resources.Limits[corev1.ResourceMemory]; !ok {
		// A confidential VM gets exactly its containers' limits.
		if spec.Resources.Limits == nil {
			spec.Resources.Limits = corev1.ResourceList{}
		}
		spec.Resources.Limits[corev1.ResourceMemory] = resource.MustParse(DefaultMemory)
	}
	ns, values, err := service.NamespacedValues(&spec, v.Namespace, v.Namespace, k.DefaultImage)
	if err != nil {
		return "", nil, err
	}
	for key, val := range map[string]any{"service": v.Spec.Service, "storage": v.Spec.Storage} {
		plain, err := service.Plain(val)
		if err != nil {
			return "", nil, err
		}
		values[key] = plain
	}
	if p, ok := values["service"].(map[string]any); ok && p["port"] == nil {
		p["port"] = servicesv1beta1.DefaultVaultPort
	}
	if s, ok := values["storage"].(map[string]any); ok && s["size"] == nil {
		s["size"] = "1Gi"
	}
	values["name"] = v.Name
	values["replicas"] = max(v.Spec.Replicas, 1)
	owners := make([]any, len(v.Spec.Policy.Owners))
	for i, o := range v.Spec.Policy.Owners {
		owners[i] = o
	}
	values["owners"] = owners
	values["threshold"] = strconv.Itoa(generate.Manifest{OwnerKeys: v.Spec.Policy.Owners}.OwnerThreshold())
	values["version"] = service.ImageTag(values["image"].(string))
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	c, err := k.confidential(ctx, v)
	if err != nil {
		return "", nil, err
	}
	plain, err := service.Plain(c)
	if err != nil {
		return "", nil, err
	}
	values["confidential"] = plain
	return ns, values, nil
}

// PostRender makes the Vault's pods confidential as cloister generate
// makes a workload's: the runtime class, the initializer first, the
// secrets volume in every container, and the pod policy, whose digest the
// policy names as the pods' identity.
func (k *Kind) PostRender(_ service.Object, values map[string]any, u *unstructured.Unstructured) error {
	if u.GetKind() != "StatefulSet" {
		return nil
	}
	raw, err := json.Marshal(values["confidential"])
	if err != nil {
		return err
	}
	var c Confidential
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("the release's values of the Vault's pods: %w", err)
	}
	if c.RuntimeClass == "" {
		return errors.New("the release's values lack what makes the Vault's pods confidential")
	}
	in, err := sigsyaml.Marshal(u.Object)
	if err != nil {
		return err
	}
	out, _, err := generate.Rewrite(context.Background(), in, generate.Options{
		RuntimeClass: c.RuntimeClass, InitializerImage: c.InitializerImage,
		CAS: c.CAS, CASExpect: c.Expect, CASSimKey: c.SimKey, Policy: c.Policy,
		PolicyOwners: c.Owners, PolicyOwnerThreshold: c.OwnerThreshold,
		GuestEvidence: c.Platform == runtimeclass.SNP || c.Platform == runtimeclass.TDX,
		// The VM's memory is the limit: requests are raised to it.
		FixResources: true, SkipServiceMesh: true,
	})
	if err != nil {
		return fmt.Errorf("making the Vault's pods confidential: %w", err)
	}
	obj := map[string]any{}
	if err := sigsyaml.Unmarshal(out, &obj); err != nil {
		return err
	}
	u.Object = obj
	// The operator's own pods: the admission policy lets it delete only
	// such (a replica renewed for a new certificate, renew.go).
	return unstructured.SetNestedField(u.Object, common.ManagedByOperator, "spec", "template", "metadata", "labels", common.LabelManagedBy)
}

// podPolicyDigest is the digest of the pod policy on the StatefulSet the
// operator renders, "" before one is rendered.
func podPolicyDigest(oos []service.Owned) string {
	for _, oo := range oos {
		if oo.Desired == nil || oo.Desired.GetKind() != "StatefulSet" {
			continue
		}
		value, _, _ := unstructured.NestedString(oo.Desired.Object, "spec", "template", "metadata", "annotations", podpolicy.Annotation)
		if _, digest, err := podpolicy.FromAnnotation(value); err == nil {
			return digest
		}
	}
	return ""
}

// FillStatus publishes the policy the owners sign, reads every replica
// and judges the Vault from them.
func (k *Kind) FillStatus(ctx context.Context, obj service.Object, oos []service.Owned) health.Observation {
	v := as(obj)
	want := max(v.Spec.Replicas, 1)
	v.Status.Replicas = want
	conds := map[health.ConditionType]health.Observation{}
	k.observed.Store(v.UID, conds)
	if v.DeletionTimestamp != nil {
		return health.Obs(health.Unknown, health.ReasonDeleting, "")
	}
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	cas, err := k.casOf(rctx, v)
	if err != nil {
		return health.Obs(health.Unknown, health.ReasonCASUnreachable, err.Error())
	}
	c, err := k.confidentialOf(rctx, v, cas)
	if err != nil {
		return health.Obs(health.Unknown, health.ReasonCASUnreachable, err.Error())
	}
	digest := podPolicyDigest(oos)
	if digest == "" {
		return health.Obs(health.Unknown, health.ReasonVaultStarting, "the pods' policy is not rendered yet")
	}
	if err := k.publishPolicy(rctx, v, c, digest); err != nil {
		return health.Obs(health.Unknown, health.ReasonVaultStarting, err.Error())
	}
	var replicas []Replica
	if k.Replicas != nil {
		replicas = k.Replicas(rctx, v)
	} else {
		rootCA, err := k.rootCA(rctx, cas)
		if err != nil {
			return health.Obs(health.Unknown, health.ReasonCASUnreachable, err.Error())
		}
		replicas = k.probe(rctx, v, rootCA)
	}
	verdict := Judge(want, replicas)
	for t, o := range verdict.Conditions {
		conds[t] = o
	}
	if len(replicas) > 0 && verdict.Initialized && v.Status.RecoveryKeysSecret == "" {
		// Until the sealed recovery keys are kept, VaultInitialized says
		// why not (the owners have no way to a root token without them).
		err := replicas[0].RecoveryErr
		if err == nil && replicas[0].Recovery != nil {
			err = k.storeRecovery(rctx, v, replicas[0].Recovery)
		}
		if err != nil || v.Status.RecoveryKeysSecret == "" {
			conds[health.VaultInitialized] = health.Obs(health.True, health.ReasonVaultRecoveryPending, fmt.Sprintf("the sealed recovery keys are not kept yet: %v", err))
		}
	}
	if r, ok := Renewal(want, replicas, k.now()); ok && k.Renew {
		if err := k.renew(rctx, r); err != nil {
			log.FromContext(ctx).Info("a Vault replica's certificate is due for renewal", "err", err)
		}
	}
	v.Status.ReadyReplicas, v.Status.SealedReplicas = verdict.Ready, verdict.Sealed
	v.Status.VaultSealedAlert = max(want-verdict.Ready, 0)
	v.Status.Leader, v.Status.Version = verdict.Leader, verdict.Version
	if verdict.Initialized && v.Status.InitializedAt == nil {
		now := metav1.Now()
		v.Status.InitializedAt = &now
	}
	return verdict.IsHealthy
}

func (k *Kind) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

// Conditions are the rows FillStatus judged for the Vault.
func (k *Kind) Conditions(obj service.Object) map[health.ConditionType]health.Observation {
	// Taken, not kept: the reconciler asks once, right after FillStatus,
	// and a Vault that is gone leaves nothing behind.
	if c, ok := k.observed.LoadAndDelete(obj.GetUID()); ok {
		return c.(map[health.ConditionType]health.Observation)
	}
	return nil
}

// rootCA is the root CA of the Vault's CAS, read over a connection
// trusted by CAS's evidence: the replicas' certificates must chain to it.
func (k *Kind) rootCA(ctx context.Context, cas *servicesv1beta1.CAS) ([]byte, error) {
	cl, _, err := (&conn.Connector{Reader: k.Reader, Dial: k.CASDial}).Connect(ctx, cas)
	if err != nil {
		return nil, fmt.Errorf("CAS %s: %w", cas.Name, err)
	}
	defer cl.CloseIdleConnections()
	cas2, err := cl.CAs(ctx)
	if err != nil {
		return nil, fmt.Errorf("CAS %s's CAs: %w", cas.Name, err)
	}
	return []byte(cas2.RootCA), nil
}

// PollAfter reads the replicas again soon until the Vault is healthy.
func (k *Kind) PollAfter(obj service.Object) time.Duration {
	if as(obj).Status.ReadyReplicas >= max(as(obj).Spec.Replicas, 1) {
		return pollHealthy
	}
	return pollWaiting
}

// Metrics: the replicas and the sealed ones.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	st := &as(obj).Status
	return []metrics.Sample{
		{Field: "vaultReplicas", Value: float64(st.Replicas)},
		{Field: "vaultReadyReplicas", Value: float64(st.ReadyReplicas)},
		{Field: "vaultSealedReplicas", Value: float64(st.SealedReplicas)},
		{Field: "vaultSealedAlert", Value: float64(st.VaultSealedAlert)},
	}
}
