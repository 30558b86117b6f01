//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/operator/admission"
	"github.com/cloister-cc/cloister/internal/operator/install"
)

// installer runs the cloister binary's install against the env's cluster
// with the operator image and the service images of the tests' build (a
// release pins them into its binaries). Nothing says where the real node
// is: install reads that from the dev cluster.
type installer struct {
	e     *realNodeEnv
	image string
	extra []string
}

func (in *installer) run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	full := append([]string{"install", "--kubeconfig", in.e.c.KubeconfigPath(), "--image", in.image, "--timeout", "3m",
		"--set=images.devicePlugin=" + pinned(t, in.e.built, "cloister-device-plugin"),
		"--set=images.las=" + pinned(t, in.e.built, "cloister-las"),
	}, in.extra...)
	cmd := exec.Command(filepath.Join(in.e.bin, "cloister"), append(full, args...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("running cloister install: %v", err)
	}
	return string(out), 0
}

// wantProblem runs the check and wants exit 1 naming each fragment.
func (in *installer) wantProblem(t *testing.T, fragments ...string) {
	t.Helper()
	out, code := in.run(t)
	if code != 1 {
		t.Fatalf("check: exit %d, want 1\n%s", code, out)
	}
	for _, f := range fragments {
		if !strings.Contains(out, f) {
			t.Errorf("check does not say %q:\n%s", f, out)
		}
	}
}

func (in *installer) wantWell(t *testing.T, args ...string) string {
	t.Helper()
	out, code := in.run(t, args...)
	if code != 0 || !strings.Contains(out, "all is well") {
		t.Fatalf("install %v: exit %d\n%s", args, code, out)
	}
	return out
}

// cloister install on the real node: from an empty cluster to the operator
// running in it with its webhooks, the checks naming each broken part and
// --reconcile repairing it, --update rolling a new image and nothing else.
func TestInstall(t *testing.T) {
	e := upRealNodeCluster(t)
	in := &installer{e: e, image: pinned(t, e.built, "cloister-operator")}
	ctx := context.Background()
	c := e.crs
	crds := crdClient(t, e)

	t.Run("an empty cluster: the check names what is missing", func(t *testing.T) {
		in.wantProblem(t, "namespace: namespace cloister-system does not exist", "crd: CustomResourceDefinition sgxplugins.base.cloister.dev is missing")
	})
	if !t.Run("--reconcile installs the operator in the cluster, HEALTHY", func(t *testing.T) {
		start := time.Now()
		out := in.wantWell(t, "--reconcile", "--verbose")
		t.Log(out)
		t.Logf("cloister install --reconcile: empty cluster to all HEALTHY in %s", time.Since(start).Round(100*time.Millisecond))
		// The dev cluster's LAS cannot quote SGX enclaves: install makes it
		// a simulated one, says so, and it is HEALTHY (all is well).
		var las basev1beta1.LAS
		if err := c.Get(ctx, client.ObjectKey{Name: install.DefaultLAS}, &las); err != nil || !las.Spec.Simulation ||
			las.Status.State != common.StateHealthy || !strings.Contains(out, "runs in simulation") {
			t.Errorf("the default LAS on the dev cluster: simulation %v, %s, %v", las.Spec.Simulation, las.Status.State, err)
		}
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: install.Deployment}, &d); err != nil {
			t.Fatal(err)
		}
		pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-operator"})
		if err != nil || len(pods.Items) != 2 {
			t.Fatalf("operator pods: %v %v", len(pods.Items), err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != cluster.RealNodeName || !podReady(&p) {
				t.Errorf("operator pod %s: %s", p.Name, podSummary(&p))
			}
		}
		if sel := d.Spec.Template.Spec.NodeSelector; sel[cluster.LabelRealNode] != "true" {
			t.Errorf("the operator's pods select %v, not the real node", sel)
		}
		in.wantWell(t) // the check alone
	}) {
		return
	}
	t.Run("the webhooks refuse what they must, through the API server", func(t *testing.T) { testInstalledWebhooks(t, e) })
	t.Run("the operator deploys only in the namespaces marked for it", func(t *testing.T) { testInstalledOperatorDeploysWhereMarked(t, e, in) })
	t.Run("metrics: a bound ServiceAccount's token scrapes them; none, or an unbound one, is refused", func(t *testing.T) { testOperatorMetrics(t, e) })

	t.Run("a deleted webhook Service is named and restored", func(t *testing.T) {
		if err := c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: install.WebhookService}}); err != nil {
			t.Fatal(err)
		}
		in.wantProblem(t, "webhook: Service cloister-system/cloister-operator-webhook is missing")
		in.wantWell(t, "--reconcile")
	})
	t.Run("a deleted CRD is named and restored", func(t *testing.T) {
		const crd = "nitroenclavedeployments.enclave.cloister.dev"
		if err := crds.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the CRD gone", time.Minute, func(ctx context.Context) (bool, string, error) {
			err := crds.Get(ctx, client.ObjectKey{Name: crd}, &apiextensionsv1.CustomResourceDefinition{})
			return apierrors.IsNotFound(err), "", nil
		})
		in.wantProblem(t, "crd: CustomResourceDefinition "+crd+" is missing")
		in.wantWell(t, "--reconcile")
	})
	t.Run("an operator scaled to 0 and a corrupt caBundle are named and repaired", func(t *testing.T) {
		scale(t, e, 0)
		corruptCABundle(t, e)
		in.wantProblem(t, "operator: Deployment cloister-operator is scaled to 0", "cabundle: the webhooks' caBundle is not a PEM certificate")
		t.Run("an unlabelled pod is admitted at once while the operator is down", func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
			start := time.Now()
			if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
				t.Fatal(err)
			}
			t.Logf("unlabelled pod admitted in %s with no operator", time.Since(start).Round(time.Millisecond))
		})
		t.Run("a pod labelled for injection is refused while the operator is down", func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "enclave-while-down", Namespace: "default", Labels: map[string]string{admission.LabelInject: admission.InjectSGX}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
			if err := c.Create(ctx, pod, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "inject.pods.cloister.dev") {
				t.Errorf("admitted without its device and LAS address, or refused for another reason: %v", err)
			}
		})
		in.wantWell(t, "--reconcile")
	})
	t.Run("a deleted pull secret is named; --reconcile with the credentials writes it", func(t *testing.T) {
		creds := []string{"--username", "robot", "--access-token", "t0ken", "--email", "robot@example.com"}
		in.wantWell(t, append([]string{"--reconcile"}, creds...)...)
		if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: install.PullSecretName}}); err != nil {
			t.Fatal(err)
		}
		in.wantProblem(t, "pull-secret: pull secret cloister-system/cloister-pull the operator's pods use is missing")
		// Without credentials it cannot be repaired: said at once, without
		// waiting for it until the timeout (the later --timeout wins).
		out, code := in.run(t, "--reconcile", "--timeout", "20s")
		if code != 1 || !strings.Contains(out, "a pull secret is written from --username, --access-token and --email") || strings.Contains(out, "gave up") {
			t.Errorf("--reconcile without credentials: exit %d\n%s", code, out)
		}
		in.wantWell(t, append([]string{"--reconcile"}, creds...)...)
		// A namespace that asks for it gets a copy from the operator.
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps",
			Labels: map[string]string{common.LabelPullSecretRequest: install.PullSecretName}}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the pull secret copied into namespace apps", time.Minute, func(ctx context.Context) (bool, string, error) {
			var s corev1.Secret
			err := c.Get(ctx, client.ObjectKey{Namespace: "apps", Name: install.PullSecretName}, &s)
			return err == nil && s.Type == corev1.SecretTypeDockerConfigJson, fmt.Sprint(err), nil
		})
	})
	t.Run("--update with a new operator image rolls the Deployment and changes nothing else", func(t *testing.T) {
		newImage := rebuildOperatorImage(t, e)
		before := resourceVersions(t, e)
		next := &installer{e: e, image: newImage}
		next.wantWell(t, "--update")
		after := resourceVersions(t, e)
		for key, rv := range before {
			changed := after[key] != rv
			if want := key == "Deployment/"+install.Deployment; changed != want {
				t.Errorf("%s changed %v, want %v", key, changed, want)
			}
		}
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: install.Deployment}, &d); err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != newImage {
			t.Errorf("the Deployment runs %s, want %s", got, newImage)
		}
		// The old image is now the wrong one.
		in.wantProblem(t, "operator: Deployment cloister-operator runs "+newImage+", want "+in.image)
	})
	if !t.Run("the Helm CLI sees the release; uninstall leaves only the CRDs", func(t *testing.T) {
		h := newHelm(t, e)
		if out := h.run(t, "list", "-n", operatorNamespace, "-q"); strings.TrimSpace(out) != install.ReleaseName {
			t.Fatalf("helm list: %q", out)
		}
		// The CRs first, while the operator runs: it removes what they own.
		for _, o := range []client.Object{install.DefaultSGXPluginCR(), install.DefaultLASCR()} {
			if err := c.Delete(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the default CRs gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
			err := c.Get(ctx, client.ObjectKey{Name: install.DefaultLAS}, &basev1beta1.LAS{})
			err2 := c.Get(ctx, client.ObjectKey{Name: install.DefaultSGXPlugin}, &basev1beta1.SGXPlugin{})
			return apierrors.IsNotFound(err) && apierrors.IsNotFound(err2), "", nil
		})
		h.run(t, "uninstall", install.ReleaseName, "-n", operatorNamespace, "--wait")
		wantOnlyCRDs(t, e)
	}) {
		return // installing over the release left would only report that
	}
	t.Run("the Helm CLI: lint, install, upgrade, uninstall", func(t *testing.T) {
		h := newHelm(t, e)
		chart := filepath.Join(repoRoot(t), "charts", "cloister-operator")
		values := []string{"--set", "image=" + in.image,
			"--set", "images.devicePlugin=" + pinned(t, e.built, "cloister-device-plugin"), "--set", "images.las=" + pinned(t, e.built, "cloister-las"),
			"--set", "host.devDir=" + e.node.DevicesDir(), "--set", "host.kubeletDir=" + e.node.KubeletRootDir(),
			"--set-string", "nodeSelector." + strings.ReplaceAll(cluster.LabelRealNode, ".", `\.`) + "=true"}
		h.run(t, append([]string{"lint", chart, "--strict"}, values...)...)
		// The CRDs the last release kept are adopted.
		h.run(t, append([]string{"install", "op", chart, "-n", operatorNamespace, "--take-ownership", "--wait", "--timeout", "3m"}, values...)...)
		h.run(t, "upgrade", "op", chart, "-n", operatorNamespace, "--reuse-values", "--set", "logLevel=debug", "--wait", "--timeout", "3m")
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: install.Deployment}, &d); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--log-level=debug") || d.Status.ReadyReplicas != 2 {
			t.Errorf("after the upgrade: args %v, %d ready", d.Spec.Template.Spec.Containers[0].Args, d.Status.ReadyReplicas)
		}
		// Its webhooks serve: an unparsable policy is refused.
		bad := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default"}, Spec: casv1beta1.SignedPolicySpec{
			CASAddress: "https://cas:8081", Policy: "name: [", Version: 1, Signatures: []casv1beta1.Signature{{Signer: "sha256:" + strings.Repeat("a", 64), Signature: strings.Repeat("A", 96)}}}}
		waitFor(t, "the webhooks of the Helm release", time.Minute, func(ctx context.Context) (bool, string, error) {
			err := c.Create(ctx, bad, client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "spec.policy"), fmt.Sprint(err), nil
		})
		h.run(t, "uninstall", "op", "-n", operatorNamespace, "--wait")
		wantOnlyCRDs(t, e)
	})
}

// helm runs the Helm CLI (built from its module) against the cluster.
type helm struct{ bin, kubeconfig string }

func newHelm(t *testing.T, e *realNodeEnv) *helm {
	t.Helper()
	hc := tools(t).HelmCLI()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := hc.Ensure(ctx, os.Stderr); err != nil {
		t.Fatal(err)
	}
	return &helm{bin: hc.Path(toolchain.Helm.Name), kubeconfig: e.c.KubeconfigPath()}
}

func (h *helm) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(h.bin, append(args, "--kubeconfig", h.kubeconfig)...)
	home := t.TempDir() // no user configuration, cache or repositories
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// wantOnlyCRDs: nothing cluster-scoped of Cloister's is left but its CRDs.
func wantOnlyCRDs(t *testing.T, e *realNodeEnv) {
	t.Helper()
	ctx := context.Background()
	cc := crdClient(t, e)
	var left []string
	var crs rbacv1.ClusterRoleList
	var crbs rbacv1.ClusterRoleBindingList
	var vs admissionregistrationv1.ValidatingWebhookConfigurationList
	var ms admissionregistrationv1.MutatingWebhookConfigurationList
	for _, l := range []client.ObjectList{&crs, &crbs, &vs, &ms} {
		if err := cc.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range crs.Items {
		if strings.HasPrefix(o.Name, "cloister") {
			left = append(left, "ClusterRole/"+o.Name)
		}
	}
	for _, o := range crbs.Items {
		if strings.HasPrefix(o.Name, "cloister") {
			left = append(left, "ClusterRoleBinding/"+o.Name)
		}
	}
	for _, o := range vs.Items {
		left = append(left, "ValidatingWebhookConfiguration/"+o.Name)
	}
	for _, o := range ms.Items {
		left = append(left, "MutatingWebhookConfiguration/"+o.Name)
	}
	if len(left) > 0 {
		t.Errorf("left after uninstall: %v", left)
	}
	shipped, _ := filepath.Glob(filepath.Join(repoRoot(t), "charts/cloister-operator/files/crds/*.yaml"))
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := cc.List(ctx, &crds, client.MatchingLabels{"app.kubernetes.io/part-of": "cloister"}); err != nil || len(crds.Items) != len(shipped) {
		t.Errorf("CRDs kept: %d of the %d shipped, %v", len(crds.Items), len(shipped), err)
	}
}

// testInstalledWebhooks: a SignedPolicy spec edit is refused and the
// stored object stays; an unparsable policy is refused naming the field;
// a CEXPlugin sharing an APQN names both sets; an opted-in pod gets the
// device and the LAS address.
func testInstalledWebhooks(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	c := e.crs
	var sp casv1beta1.SignedPolicy
	readSample(t, "cas_v1beta1_signedpolicy.yaml", &sp)
	if err := c.Create(ctx, &sp); err != nil {
		t.Fatalf("the sample SignedPolicy: %v", err)
	}
	// The policy controller writes the status meanwhile (no CAS resource
	// here): edit the latest copy, so only the spec rule can refuse it.
	var stored casv1beta1.SignedPolicy
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(&sp), &stored); err != nil {
			return err
		}
		edited := stored.DeepCopy()
		edited.Spec.CASAddress = "elsewhere.default.svc:8081"
		return c.Update(ctx, edited)
	})
	if err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Errorf("a spec edit: %v", err)
	}
	var now casv1beta1.SignedPolicy
	if err := c.Get(ctx, client.ObjectKeyFromObject(&sp), &now); err != nil || now.Spec.CASAddress != stored.Spec.CASAddress || now.Generation != stored.Generation {
		t.Errorf("the stored policy changed: %+v (generation %d -> %d) %v", now.Spec.CASAddress, stored.Generation, now.Generation, err)
	}
	// A tenant's resources name only its policies: the sample (policy
	// default/sample) in another namespace is refused at admission.
	elsewhere := sp.DeepCopy()
	elsewhere.ObjectMeta = metav1.ObjectMeta{Name: "sample", Namespace: "kube-system"}
	if err := c.Create(ctx, elsewhere); err == nil || !strings.Contains(err.Error(), "the policy is named default/sample, outside namespace kube-system") {
		t.Errorf("a policy of another namespace: %v", err)
	}
	bad := sp.DeepCopy()
	bad.ObjectMeta = metav1.ObjectMeta{Name: "unparsable", Namespace: "default"}
	bad.Spec.Policy = "name: ["
	if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.policy: Invalid value: the policy document is invalid") {
		t.Errorf("an unparsable policy: %v", err)
	}
	cex := &basev1beta1.CEXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: basev1beta1.CEXPluginSpec{ConfigSets: []basev1beta1.CryptoConfigSet{
		{Name: "payments", APQNs: []basev1beta1.APQN{{Adapter: 3, Domain: 11}}},
		{Name: "audit", APQNs: []basev1beta1.APQN{{Adapter: 3, Domain: 11}}},
	}}}
	if err := c.Create(ctx, cex); err == nil || !strings.Contains(err.Error(), `configSets[1] (audit).apqns[0]: duplicate APQN 03.000b (adapter 3, domain 11), already in set "payments"`) {
		t.Errorf("a shared APQN: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "enclave", Namespace: "default", Labels: map[string]string{admission.LabelInject: admission.InjectSGX}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	ctr := pod.Spec.Containers[0]
	if q := ctr.Resources.Limits[corev1.ResourceName(tee.SGXEnclave)]; q.Value() != 1 || len(ctr.Env) != 2 || ctr.Env[1].Name != laswire.EnvAddr {
		t.Errorf("the injected pod: %+v", ctr)
	}
}

// crdClient also knows CustomResourceDefinitions.
func crdClient(t *testing.T, e *realNodeEnv) client.Client {
	t.Helper()
	cfg, err := e.c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	s, err := install.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func scale(t *testing.T, e *realNodeEnv, replicas int32) {
	t.Helper()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: install.Deployment}}
	patch := []byte(`{"spec":{"replicas":` + strconv.Itoa(int(replicas)) + `}}`)
	if err := e.crs.SubResource("scale").Patch(context.Background(), d, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the operator's pods gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-operator"})
		if err != nil {
			return false, err.Error(), nil
		}
		return len(pods.Items) == 0, "", nil
	})
}

func corruptCABundle(t *testing.T, e *realNodeEnv) {
	t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	if err := e.crs.Get(context.Background(), client.ObjectKey{Name: install.WebhookConfig}, &m); err != nil {
		t.Fatal(err)
	}
	m.Webhooks[0].ClientConfig.CABundle = []byte("garbage")
	if err := e.crs.Update(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
}

// rebuildOperatorImage makes another operator image (same binary, another
// revision label: another digest) and imports it on the node.
func rebuildOperatorImage(t *testing.T, e *realNodeEnv) string {
	t.Helper()
	img, err := image.Build(image.Spec{Name: "cloister-operator", Binary: filepath.Join(e.bin, "cloister-operator"),
		Version: imageVersion, Revision: version.Get().Commit + "-next", Source: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	ref := image.Ref(image.DefaultRegistry, "cloister-operator", imageVersion)
	file := filepath.Join(t.TempDir(), "operator-next.tar")
	if err := image.WriteOCI(img, ref, file); err != nil {
		t.Fatal(err)
	}
	if err := e.node.Import(context.Background(), file); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref + "@" + digest.String()
}

// resourceVersions of some of the release's objects (not the CRs, whose
// status moves on its own).
func resourceVersions(t *testing.T, e *realNodeEnv) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for key, obj := range map[string]client.Object{
		"Deployment/" + install.Deployment:                        &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: install.Deployment}},
		"Service/" + install.WebhookService:                       &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: install.WebhookService}},
		"ServiceAccount/cloister-operator":                        &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "cloister-operator"}},
		"ClusterRole/cloister-operator":                           &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cloister-operator"}},
		"ValidatingWebhookConfiguration/" + install.WebhookConfig: &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: install.WebhookConfig}},
		"CustomResourceDefinition/las.base.cloister.dev":          &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "las.base.cloister.dev"}},
		"SGXPlugin/" + install.DefaultSGXPlugin:                   &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: install.DefaultSGXPlugin}},
	} {
		if err := crdClient(t, e).Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		out[key] = obj.GetResourceVersion()
	}
	return out
}
