package install

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/cluster/devinfo"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// OperatorImage is the operator image this cloister installs, pinned by
// digest at link time (make build); empty in a plain go build.
var OperatorImage string

// PullSecretName is the pull secret install creates from credentials.
const PullSecretName = "cloister-pull" //nolint:gosec // a Secret's name, not a credential

// Credentials of a registry, for the pull secret.
type Credentials struct {
	Server, Username, Token, Email string
}

// Releases is what install needs of Helm.
type Releases interface {
	Install(ctx context.Context, req release.Request) error
	Upgrade(ctx context.Context, req release.Request) error
	Latest(ns, name string) (string, error)
}

// Installer checks and repairs one cluster.
type Installer struct {
	Client   client.Client // uncached: reads what is there now
	Releases Releases
	Chart    *chart.Chart
	Want     Want
	// Values are the user's chart values (--set); install adds the image
	// and the pull secret.
	Values      map[string]any
	Credentials *Credentials
	// DCAPKey, when set, is the Intel DCAP API key written to the Secret
	// DCAPSecretName at a reconcile.
	DCAPKey string
	// Progress reports what is being done (--verbose); nil is quiet.
	Progress func(format string, args ...any)
	// Timeout bounds each wait (operator ready, CRs HEALTHY).
	Timeout time.Duration
	// Poll is the interval of the waits.
	Poll time.Duration
	// GaveUp is set when Reconcile stopped waiting at Timeout with
	// problems left (they are what it returns).
	GaveUp error
}

func (in *Installer) progress(format string, args ...any) {
	if in.Progress != nil {
		in.Progress(format, args...)
	}
}

// Check reads the cluster and lists its problems.
func (in *Installer) Check(ctx context.Context) ([]Problem, error) {
	dev, err := ReadDevCluster(ctx, in.Client)
	if err != nil {
		return nil, err
	}
	want := in.want(dev)
	s, err := Read(ctx, in.Client, want, func() (string, error) { return in.Releases.Latest(want.Namespace, ReleaseName) })
	if err != nil {
		return nil, fmt.Errorf("reading the cluster: %w", err)
	}
	ps := Judge(s, want)
	if dev != nil && dev.RealNode == "" {
		ps = append([]Problem{{PartOperator, devinfo.ErrNoRealNode.Error()}}, ps...)
	}
	return ps, nil
}

// want is what the cluster should have: on the dev cluster, the operator's
// pods on its real node too.
func (in *Installer) want(dev *devinfo.Info) Want {
	w := in.Want
	if dev != nil && dev.RealNode != "" {
		w.NodeSelector = devinfo.NodeSelector()
	}
	return w
}

// ReadDevCluster reads what a dev cluster says of itself; nil: this is not
// one (or its description cannot be read by this user).
func ReadDevCluster(ctx context.Context, c client.Reader) (*devinfo.Info, error) {
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: devinfo.Namespace, Name: devinfo.Name}, &cm)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the cluster: %w", err)
	}
	info, err := devinfo.FromConfigMap(&cm)
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// Reconcile repairs what Check finds (with update, redeploys even when all
// is well) and returns the problems left after waiting for the repair.
func (in *Installer) Reconcile(ctx context.Context, update bool) ([]Problem, error) {
	dev, err := ReadDevCluster(ctx, in.Client)
	if err != nil {
		return nil, err
	}
	if dev != nil && dev.RealNode == "" {
		return nil, devinfo.ErrNoRealNode
	}
	problems, err := in.Check(ctx)
	if err != nil {
		return nil, err
	}
	// Given credentials are written even when all is well (a token may
	// have been refreshed), and pods must then use the secret.
	if in.Credentials != nil && !in.usesPullSecret(ctx) {
		update = true
	}
	if len(problems) == 0 && !update && in.Credentials == nil && in.DCAPKey == "" {
		return nil, nil
	}
	if slices.ContainsFunc(problems, func(p Problem) bool { return p.Part == PartNamespace }) {
		in.progress("creating namespace %s", in.Want.Namespace)
		if err := CreateNamespace(ctx, in.Client, in.Want.Namespace); err != nil {
			return nil, err
		}
	}
	if in.DCAPKey != "" {
		in.progress("writing the DCAP API key's Secret %s/%s", in.Want.Namespace, DCAPSecretName)
		if err := WriteDCAPKey(ctx, in.Client, in.Want.Namespace, in.DCAPKey); err != nil {
			return nil, err
		}
	}
	if in.Credentials != nil {
		in.progress("writing pull secret %s/%s", in.Want.Namespace, PullSecretName)
		if err := in.writePullSecret(ctx); err != nil {
			return nil, err
		}
	}
	if update || slices.ContainsFunc(problems, func(p Problem) bool { return p.Part != PartSGXPlugin && p.Part != PartLAS }) {
		if err := in.apply(ctx, dev); err != nil {
			return nil, err
		}
	}
	if err := in.waitFor(ctx, "the operator and its webhooks", func(p Problem) bool {
		return p.Part == PartOperator || p.Part == PartWebhook || p.Part == PartCRD || p.Part == PartRelease
	}); err != nil {
		return in.remaining(ctx, err)
	}
	if err := in.repairCABundle(ctx); err != nil {
		return nil, err
	}
	if err := in.createDefaults(ctx, dev != nil); err != nil {
		return nil, err
	}
	// A missing pull secret without credentials cannot be repaired here:
	// waiting for it would only delay saying so.
	return in.remaining(ctx, in.waitFor(ctx, "everything", func(p Problem) bool {
		return p.Part != PartPullSecret || in.Credentials != nil
	}))
}

// remaining re-checks after a wait: the problems left say more than a
// timeout does.
func (in *Installer) remaining(ctx context.Context, waitErr error) ([]Problem, error) {
	ps, err := in.Check(ctx)
	if err != nil {
		return nil, errors.Join(waitErr, err)
	}
	if len(ps) == 0 {
		return nil, nil
	}
	in.GaveUp = waitErr
	return ps, nil
}

// apply installs the operator's release, or upgrades it: an upgrade
// restores deleted or changed objects, rolls a new image and applies this
// version's CRDs. CRDs applied with kubectl are adopted.
func (in *Installer) apply(ctx context.Context, dev *devinfo.Info) error {
	values := map[string]any{}
	if dev != nil {
		// The dev cluster's own values, under the user's.
		values = dev.Values()
	}
	values = mergeValues(values, in.Values)
	values["image"] = in.Want.Image
	// Pods keep a pull secret they use even while it is missing: dropping
	// it would hide the problem until the next image pull fails.
	if in.Credentials != nil || in.hasPullSecret(ctx) || in.usesPullSecret(ctx) {
		values["imagePullSecrets"] = []any{map[string]any{"name": PullSecretName}}
	}
	req := release.Request{Name: ReleaseName, Namespace: in.Want.Namespace, Chart: in.Chart, Values: values, TakeOwnership: true}
	status, err := in.Releases.Latest(in.Want.Namespace, ReleaseName)
	if err != nil {
		return err
	}
	if status == "" {
		in.progress("installing the operator chart (release %s/%s, image %s)", in.Want.Namespace, ReleaseName, in.Want.Image)
		return in.Releases.Install(ctx, req)
	}
	in.progress("upgrading the operator chart (release %s/%s, image %s)", in.Want.Namespace, ReleaseName, in.Want.Image)
	return in.Releases.Upgrade(ctx, req)
}

// mergeValues is base with over's values on top, maps merged key by key
// (as Helm merges values files). Neither is changed.
func mergeValues(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range over {
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = mergeValues(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}

// usesPullSecret: the operator's Deployment names the pull secret.
func (in *Installer) usesPullSecret(ctx context.Context) bool {
	var d appsv1.Deployment
	if err := in.Client.Get(ctx, client.ObjectKey{Namespace: in.Want.Namespace, Name: Deployment}, &d); err != nil {
		return false
	}
	return slices.Contains(d.Spec.Template.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: PullSecretName})
}

func (in *Installer) hasPullSecret(ctx context.Context) bool {
	err := in.Client.Get(ctx, client.ObjectKey{Namespace: in.Want.Namespace, Name: PullSecretName}, &corev1.Secret{})
	return err == nil
}

// CreateNamespace creates ns unless it exists.
func CreateNamespace(ctx context.Context, c client.Client, ns string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"app.kubernetes.io/part-of": "cloister"}}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	return nil
}

// ManageNamespace creates ns, or marks it if it exists, as a namespace the
// operator may deploy in (common.LabelManagedNamespace): the chart's
// admission policy refuses its writes in any namespace without the label
// but its own.
func ManageNamespace(ctx context.Context, c client.Client, ns string) error {
	if err := CreateNamespace(ctx, c, ns); err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"true"}}}`, common.LabelManagedNamespace)
	err := c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, client.RawPatch(types.MergePatchType, patch))
	if err != nil {
		return fmt.Errorf("labelling namespace %s %s=true: %w", ns, common.LabelManagedNamespace, err)
	}
	return nil
}

// DockerConfig is the .dockerconfigjson of one registry's credentials.
func DockerConfig(c Credentials) ([]byte, error) {
	auth := base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Token))
	return json.Marshal(map[string]any{"auths": map[string]any{c.Server: map[string]string{
		"username": c.Username, "password": c.Token, "email": c.Email, "auth": auth,
	}}})
}

func (in *Installer) writePullSecret(ctx context.Context) error {
	data, err := DockerConfig(*in.Credentials)
	if err != nil {
		return err
	}
	// Shareable: the operator copies it into namespaces that ask for it.
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: PullSecretName, Namespace: in.Want.Namespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "cloister", common.LabelShareable: "true"}}}
	var live corev1.Secret
	err = in.Client.Get(ctx, client.ObjectKeyFromObject(s), &live)
	switch {
	case apierrors.IsNotFound(err):
		s.Type = corev1.SecretTypeDockerConfigJson
		s.Data = map[string][]byte{corev1.DockerConfigJsonKey: data}
		return in.Client.Create(ctx, s)
	case err != nil:
		return err
	}
	live.Data = map[string][]byte{corev1.DockerConfigJsonKey: data}
	live.Labels = s.Labels
	return in.Client.Update(ctx, &live)
}

// repairCABundle writes the Secret's CA into webhooks whose caBundle is
// not it. The operator does the same when it runs; this repairs it when
// it does not.
func (in *Installer) repairCABundle(ctx context.Context) error {
	ps, err := in.Check(ctx)
	if err != nil || !slices.ContainsFunc(ps, func(p Problem) bool { return p.Part == PartCABundle }) {
		return err
	}
	var sec corev1.Secret
	if err := in.Client.Get(ctx, client.ObjectKey{Namespace: in.Want.Namespace, Name: CertSecret}, &sec); err != nil {
		return err
	}
	ca := sec.Data["ca.crt"]
	if len(ca) == 0 {
		return nil // the operator has not made its CA yet
	}
	in.progress("writing the CA into the webhooks' caBundle")
	return patchCABundles(ctx, in.Client, ca)
}

// createDefaults creates the default SGXPlugin and LAS; on a dev cluster
// (devCluster), whose nodes cannot quote SGX enclaves, the LAS runs in
// simulation, which it and its status say is insecure.
func (in *Installer) createDefaults(ctx context.Context, devCluster bool) error {
	if in.Want.OnlyOperator {
		return nil
	}
	var objs []client.Object
	if !in.Want.NoSGXPlugin {
		objs = append(objs, DefaultSGXPluginCR())
	}
	las := DefaultLASCR()
	las.Spec.Simulation = devCluster
	objs = append(objs, las)
	for _, o := range objs {
		err := in.create(ctx, o)
		if err == nil {
			in.progress("created %s %s", reflect.TypeOf(o).Elem().Name(), o.GetName())
			if o == las && devCluster {
				in.progress("LAS %s runs in simulation (a dev cluster cannot quote SGX enclaves): its evidence is insecure, for development only", las.Name)
			}
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s: %w", o.GetName(), err)
		}
	}
	return nil
}

// create creates o, trying again (until Timeout) while the API server
// cannot reach the operator's webhooks: right after the operator's pod
// turns ready, or while the API server is loaded, a call can time out.
// Any other error is returned at once.
func (in *Installer) create(ctx context.Context, o client.Object) error {
	deadline := time.Now().Add(cmp.Or(in.Timeout, time.Minute))
	for {
		err := in.Client.Create(ctx, o)
		transient := apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
		if !transient || time.Now().After(deadline) {
			return err
		}
		in.progress("creating %s: the API server cannot reach the operator's webhook yet (%v); trying again", o.GetName(), err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(cmp.Or(in.Poll, time.Second)):
		}
	}
}

// DefaultSGXPluginCR is the SGXPlugin install creates, as the sample: on
// every Linux node, its image (pinned by digest) pulled only when absent.
func DefaultSGXPluginCR() *basev1beta1.SGXPlugin {
	p := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: DefaultSGXPlugin}}
	p.Spec.ImagePullPolicy = corev1.PullIfNotPresent
	p.Spec.NodeSelector = common.NodeSelector{corev1.LabelOSStable: "linux"}
	return p
}

// DefaultLASCR is the LAS install creates, as the sample: on the nodes
// the SGXPlugin found SGX on.
func DefaultLASCR() *basev1beta1.LAS {
	l := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: DefaultLAS}}
	l.Spec.ImagePullPolicy = corev1.PullIfNotPresent
	l.Spec.NodeSelector = common.NodeSelector{tee.LabelSGX: "true"}
	return l
}

// waitSaysEvery is how often a wait says what is left.
const waitSaysEvery = 5 * time.Second

// waitFor polls Check until no problem matching blocking is left.
func (in *Installer) waitFor(ctx context.Context, what string, blocking func(Problem) bool) error {
	in.progress("waiting for %s", what)
	deadline, said := time.Now().Add(in.Timeout), time.Now()
	var last []Problem
	for {
		ps, err := in.Check(ctx)
		if err != nil {
			return err
		}
		last = slices.DeleteFunc(ps, func(p Problem) bool { return !blocking(p) })
		if len(last) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s", in.Timeout, what)
		}
		// A wait says what it still waits for, never minutes of silence.
		if time.Since(said) >= waitSaysEvery {
			in.progress("still waiting for %s: %v (%d left)", what, last[0], len(last))
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(in.Poll):
		}
	}
}

// patchCABundles sets every webhook's caBundle in the operator's two
// configurations to ca.
func patchCABundles(ctx context.Context, c client.Client, ca []byte) error {
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: WebhookConfig}, &v); err != nil {
		return err
	}
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = ca
	}
	if err := c.Update(ctx, &v); err != nil {
		return fmt.Errorf("writing the caBundle of %s: %w", WebhookConfig, err)
	}
	var m admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: WebhookConfig}, &m); err != nil {
		return err
	}
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = ca
	}
	if err := c.Update(ctx, &m); err != nil {
		return fmt.Errorf("writing the caBundle of %s: %w", WebhookConfig, err)
	}
	return nil
}
