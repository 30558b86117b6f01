//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// casWork is what the CAS steps share: the owner's keys and files.
type casWork struct {
	dir          string
	owner        string // private key file
	ownerPub     string
	v2file       string // the SignedPolicy of the shop policy's current version
	shares       string
	recoveryKeys []string
}

var work *casWork

// cli runs the cloister binary of the images against the dev cluster.
func (e *realNodeEnv) cli(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(filepath.Join(e.bin, "cloister"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.c.KubeconfigPath())
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), &cliError{args: args, err: err, stderr: errOut.String()}
	}
	return out.String() + errOut.String(), nil
}

func (e *realNodeEnv) mustCLI(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.cli(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func healthyCondition(st *common.ServiceStatus, typ health.ConditionType) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == string(typ) {
			return c
		}
	}
	return metav1.Condition{}
}

// waitCondition waits until obj's condition typ has reason.
func waitCondition(t testing.TB, crs client.Client, obj serviceCR, typ health.ConditionType, reason health.Reason) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	waitFor(t, fmt.Sprintf("%T %s: %s with reason %s", obj, obj.GetName(), typ, reason), 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := crs.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error(), nil
		}
		got = healthyCondition(obj.GetServiceStatus(), typ)
		return got.Reason == string(reason), fmt.Sprintf("%s %s: %s", obj.GetServiceStatus().State, got.Reason, got.Message), nil
	})
	return got
}

func simCAS(name string) *servicesv1beta1.CAS {
	return &servicesv1beta1.CAS{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: servicesv1beta1.CASSpec{Simulation: true, ServiceSpec: common.ServiceSpec{ImagePullPolicy: corev1.PullIfNotPresent,
			NodeSelector: common.NodeSelector{cluster.LabelRealNode: "true"}}}}
}

// A CAS resource runs CAS on the real node; it says it waits for init and
// what to run; cloister cas init --cluster (through the API server, no
// LoadBalancer) makes it HEALTHY with the version CAS reports.
func testCASNeedsInit(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	cas := simCAS("cas")
	if err := e.crs.Create(ctx, cas); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "default", conn.PodName("cas"), "to run on the real node", 2*time.Minute, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == e.node.Name
	})
	c := waitCondition(t, e.crs, cas, health.IsHealthy, health.ReasonCASUninitialized)
	if cas.Status.State != common.StateUnhealthy || !strings.Contains(c.Message, "cloister cas init --cluster default/cas") {
		t.Errorf("an uninitialised CAS: %s, %q", cas.Status.State, c.Message)
	}
	work = &casWork{dir: filepath.Join(e.dir, "cas")}
	if err := os.MkdirAll(work.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var initArgs []string
	for _, name := range []string{"r1", "r2", "r3"} {
		key := filepath.Join(work.dir, name+".pem")
		pub := e.mustCLI(t, "policy", "keygen", "--out", key)
		pubFile := key + ".pub"
		if err := os.WriteFile(pubFile, []byte(pub), 0o644); err != nil {
			t.Fatal(err)
		}
		work.recoveryKeys = append(work.recoveryKeys, key)
		initArgs = append(initArgs, "--recovery-owner", pubFile)
	}
	work.shares = filepath.Join(work.dir, "shares.json")
	out := e.mustCLI(t, append([]string{"cas", "init", "--cluster", "default/cas", "--insecure-simulated-cas",
		"--threshold", "2", "--out", work.shares}, initArgs...)...)
	if !strings.Contains(out, "any 2 recover it") || !strings.Contains(out, "simulated evidence") {
		t.Errorf("cas init --cluster: %s", out)
	}
	waitState(t, e.crs, cas, common.StateHealthy)
	if cas.Status.Version == "" || cas.Status.CASState != "ready" {
		t.Errorf("status %+v", cas.Status)
	}
	got, err := kubectl(t, e.c, "get", "cas", "cas", "-n", "default")
	if err != nil || !strings.Contains(got, "HEALTHY") || !strings.Contains(got, cas.Status.Version) || !strings.Contains(got, "VERSION") {
		t.Errorf("kubectl get cas: %v\n%s", err, got)
	}
}

// The CAS Service honours spec.service (NodePort with its node ports,
// LoadBalancer with annotations), and an edit against the spec is
// repaired.
func testCASServiceFields(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	cas := simCAS("cas-svc")
	cas.Spec.Service = servicesv1beta1.CASService{Type: corev1.ServiceTypeNodePort, ClientPort: 8081, EnclavePort: 18765,
		NodePorts: &servicesv1beta1.CASNodePorts{ClientPort: 30081, EnclavePort: 30765}}
	if err := e.crs.Create(ctx, cas); err != nil {
		t.Fatal(err)
	}
	service := func(what string, ok func(*corev1.Service) bool) *corev1.Service {
		var svc *corev1.Service
		waitFor(t, "Service cas-svc "+what, 2*time.Minute, func(ctx context.Context) (bool, string, error) {
			s, err := e.cs.CoreV1().Services("default").Get(ctx, "cas-svc", metav1.GetOptions{})
			if err != nil {
				// Say what the CR says, to tell a slow operator from a failed release.
				var cr servicesv1beta1.CAS
				_ = e.crs.Get(ctx, client.ObjectKeyFromObject(cas), &cr)
				var notes []string
				for _, c := range cr.Status.Conditions {
					if !strings.HasSuffix(c.Reason, "AsExpected") && c.Status != metav1.ConditionTrue {
						notes = append(notes, c.Type+"="+string(c.Status)+" "+c.Reason+": "+c.Message)
					}
				}
				return false, err.Error() + "; CR: " + strings.Join(notes, "; "), nil
			}
			svc = s
			return ok(s), fmt.Sprintf("%s %+v %v", s.Spec.Type, s.Spec.Ports, s.Annotations), nil
		})
		return svc
	}
	nodePorts := func(s *corev1.Service) bool {
		return s.Spec.Type == corev1.ServiceTypeNodePort && len(s.Spec.Ports) == 2 &&
			s.Spec.Ports[0].NodePort == 30081 && s.Spec.Ports[1].NodePort == 30765
	}
	service("as NodePort with the given node ports", nodePorts)
	patch := `{"spec":{"ports":[{"name":"client","port":8081,"nodePort":30099},{"name":"enclave","port":18765,"nodePort":30765}]}}`
	if _, err := e.cs.CoreV1().Services("default").Patch(ctx, "cas-svc", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	service("repaired to the spec's node ports", nodePorts)

	// The operator writes the status meanwhile: edit the latest copy.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(cas), cas); err != nil {
			return err
		}
		cas.Spec.Service = servicesv1beta1.CASService{Type: corev1.ServiceTypeLoadBalancer, ClientPort: 8081, EnclavePort: 18765,
			Annotations: map[string]string{"lb.example.com/internal": "true"}}
		return e.crs.Update(ctx, cas)
	})
	if err != nil {
		t.Fatal(err)
	}
	service("as LoadBalancer with the annotations", func(s *corev1.Service) bool {
		return s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Annotations["lb.example.com/internal"] == "true"
	})
	if err := e.crs.Delete(ctx, cas); err != nil {
		t.Fatal(err)
	}
}

// policyDoc is the shop policy owned by ownerPub; validity makes versions.
func policyDoc(ownerPub, validity string) string {
	return "version: cloister.dev/policy/v1\nname: default/shop\nowners:\n  keys:\n  - |\n" + indent(ownerPub, "    ") +
		"allowSimulation: true\nservices:\n- name: web\n  attestation: {identities: []}\n" +
		"  certificate: {sans: [web.shop.svc], validity: " + validity + "}\n  env: {TOKEN: \"{{ .Secrets.token.Hex }}\"}\n  secrets: [token]\n" +
		"secrets:\n- {name: token, kind: symmetric-key, size: 16}\n"
}

// signPolicy writes the SignedPolicy resource name for doc signed by key
// as the version after the SignedPolicy file after, or as version 1, a new
// name, which a majority of the board (two of the three recovery owners)
// signs too.
func (e *realNodeEnv) signPolicy(t testing.TB, name, doc, key, after string) string {
	t.Helper()
	return e.signPolicyFor(t, "cas.default.svc:8081", name, doc, key, after)
}

// signPolicyFor is signPolicy for the CAS at casAddress.
func (e *realNodeEnv) signPolicyFor(t testing.TB, casAddress, name, doc, key, after string) string {
	t.Helper()
	src := filepath.Join(work.dir, name+".policy.yaml")
	if err := os.WriteFile(src, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	link := []string{"--version", "1"}
	if after != "" {
		link = []string{"--after", after}
	}
	out := e.mustCLI(t, append([]string{"policy", "sign", "--key", key, "--cas-address", casAddress, "--name", name, src}, link...)...)
	file := filepath.Join(work.dir, name+".yaml")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if after == "" {
		// A new name: a majority of the board (the three recovery owners)
		// approves it.
		for _, k := range work.recoveryKeys[:2] {
			if err := os.WriteFile(file, []byte(e.mustCLI(t, "policy", "sign", "--key", k, file)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return file
}

func (e *realNodeEnv) applyFile(t testing.TB, file string) {
	t.Helper()
	if out, err := kubectl(t, e.c, "apply", "-n", "default", "-f", file); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", file, err, out)
	}
}

// casHistory reads CAS's history of the shop policy through a
// port-forward, trusting CAS by its (simulated) evidence.
func (e *realNodeEnv) casHistory(t *testing.T, cas string) []string {
	t.Helper()
	ctx := context.Background()
	cfg, err := e.c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	dial, stop, err := conn.PortForward(ctx, cfg, "default", conn.PodName(cas))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cr := &servicesv1beta1.CAS{}
	if err := e.crs.Get(ctx, client.ObjectKey{Namespace: "default", Name: cas}, cr); err != nil {
		t.Fatal(err)
	}
	// Its simulated evidence, signed by the key the operator made for it.
	cl, _, err := casclient.NewAttested(ctx, conn.Ref{Namespace: "default", Name: cas, Port: 8081}.URL(), conn.Expect(cr), dial)
	if err != nil {
		t.Fatal(err)
	}
	h, err := cl.History(ctx, "default/shop")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range h.Records {
		out = append(out, r.Digest)
	}
	return out
}

// SignedPolicy → HEALTHY with its hash; a second version signed by the
// owner → HEALTHY with the first as predecessor; one signed by a stranger
// → UNHEALTHY with CAS's reason, CAS's policy unchanged; a spec edit
// refused; an EncryptedPolicy sealed to another CAS → UNHEALTHY naming it.
func testPolicies(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	work.owner = filepath.Join(work.dir, "owner.pem")
	work.ownerPub = e.mustCLI(t, "policy", "keygen", "--out", work.owner)

	start := time.Now()
	v1file := e.signPolicy(t, "shop-v1", policyDoc(work.ownerPub, "24h"), work.owner, "")
	e.applyFile(t, v1file)
	v1 := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shop-v1", Namespace: "default"}}
	waitState(t, e.crs, v1, common.StateHealthy)
	t.Logf("SignedPolicy HEALTHY %s after kubectl apply", time.Since(start).Round(time.Millisecond))
	if v1.Status.Hash == "" || v1.Status.Revision != 1 || v1.Status.PolicyName != "default/shop" || v1.Status.Predecessor != "" {
		t.Errorf("v1 status %+v", v1.Status)
	}
	if got, err := kubectl(t, e.c, "get", "spol", "shop-v1", "-n", "default"); err != nil || !strings.Contains(got, v1.Status.Hash) {
		t.Errorf("kubectl get spol shows no hash: %v\n%s", err, got)
	}

	work.v2file = e.signPolicy(t, "shop-v2", policyDoc(work.ownerPub, "48h"), work.owner, v1file)
	e.applyFile(t, work.v2file)
	v2 := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shop-v2", Namespace: "default"}}
	waitState(t, e.crs, v2, common.StateHealthy)
	if v2.Status.Predecessor != v1.Status.Hash || v2.Status.Revision != 2 {
		t.Errorf("v2 status %+v, want predecessor %s", v2.Status, v1.Status.Hash)
	}

	stranger := filepath.Join(work.dir, "stranger.pem")
	e.mustCLI(t, "policy", "keygen", "--out", stranger)
	e.applyFile(t, e.signPolicy(t, "shop-v3", policyDoc(work.ownerPub, "72h"), stranger, work.v2file))
	v3 := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shop-v3", Namespace: "default"}}
	c := waitCondition(t, e.crs, v3, health.Registered, health.ReasonPolicyRefused)
	if v3.Status.State != common.StateUnhealthy || !strings.Contains(c.Message, "unauthorized") {
		t.Errorf("v3 signed by a stranger: %s %q", v3.Status.State, c.Message)
	}
	if h := e.casHistory(t, "cas"); len(h) != 2 || h[1] != v2.Status.Hash {
		t.Errorf("CAS's history after a refused version: %v", h)
	}
	// A copy of the current version signed by a stranger claims an
	// approval nobody gave: CAS checks signatures before "unchanged".
	e.applyFile(t, e.signPolicy(t, "shop-v2-copy", policyDoc(work.ownerPub, "48h"), stranger, v1file))
	copied := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shop-v2-copy", Namespace: "default"}}
	c = waitCondition(t, e.crs, copied, health.Registered, health.ReasonPolicyRefused)
	if copied.Status.State != common.StateUnhealthy || !strings.Contains(c.Message, "is not among the keys that may approve version 2") {
		t.Errorf("a stranger's copy of v2: %s %q", copied.Status.State, c.Message)
	}

	out, err := kubectl(t, e.c, "patch", "spol", "shop-v1", "-n", "default", "--type=merge", "-p", `{"spec":{"casAddress":"x.default.svc:8081"}}`)
	if err == nil || !strings.Contains(out, "spec is immutable") {
		t.Errorf("editing a SignedPolicy's spec: %v\n%s", err, out)
	}

	other, _ := policy.NewEncryptionKey(randomIKM(t))
	otherKey := filepath.Join(work.dir, "other-cas.key")
	if err := os.WriteFile(otherKey, []byte(policy.EncodePublicKey(other.PublicKey())), 0o644); err != nil {
		t.Fatal(err)
	}
	sealed := e.mustCLI(t, "policy", "encrypt", "--key", work.owner, "--version", "1", "--cas-public-key", otherKey, "--cas-address", "cas.default.svc:8081",
		filepath.Join(work.dir, "shop-v1.policy.yaml"))
	sealedFile := filepath.Join(work.dir, "sealed.yaml")
	if err := os.WriteFile(sealedFile, []byte(strings.Replace(sealed, "name: shop\n", "name: shop-elsewhere\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.applyFile(t, sealedFile)
	var list casv1beta1.EncryptedPolicyList
	if err := e.crs.List(ctx, &list, client.InNamespace("default")); err != nil || len(list.Items) != 1 {
		t.Fatalf("EncryptedPolicies: %v %d", err, len(list.Items))
	}
	ep := &list.Items[0]
	c = waitCondition(t, e.crs, ep, health.Registered, health.ReasonPolicyRefused)
	if ep.Status.State != common.StateUnhealthy || !strings.Contains(c.Message, "sealed to key") {
		t.Errorf("sealed to another CAS: %s %q", ep.Status.State, c.Message)
	}
}

func randomIKM(t *testing.T) []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// A pod on the real node whose init container attests with its node's LAS
// at status.hostIP:18766 (a hostPort) gets its certificate, env and
// secrets; its main container starts with them.
func testWorkloadAttestsThroughLAS(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	las := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: "real"}}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(las), las); err != nil {
			return err
		}
		las.Spec.Simulation = true
		return e.crs.Update(ctx, las)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "LAS pods with simulation", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-las"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err, pods), nil
		}
		p := pods.Items[0]
		return podReady(&p) && strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--simulation"), podSummary(&p), nil
	})
	// CAS takes the pod's simulated evidence only once it pins its LAS's
	// key, which the operator read from the LAS pod and published.
	waitLASPinned(t, e, "cas")
	casPod, err := e.cs.CoreV1().Pods("default").Get(ctx, conn.PodName("cas"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cliImg, _ := pullNever("cloister")
	pauseImg, _ := pullNever("cloister-pause")
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: onRealNode(corev1.PodSpec{
			// No cluster DNS on the dev cluster: the Service's name, as
			// workloads use it, resolves to CAS's pod here.
			HostAliases: []corev1.HostAlias{{IP: casPod.Status.PodIP, Hostnames: []string{"cas.default.svc"}}},
			InitContainers: []corev1.Container{{
				Name: "attest", Image: cliImg, ImagePullPolicy: corev1.PullNever,
				// CAS's simulation key from the ConfigMap the operator
				// publishes it in: another simulated CAS is not trusted.
				Args: []string{"cas", "attest", "--cas", "https://cas.default.svc:8081", "--insecure-simulated-cas", "--cas-sim-key", "/run/cloister-cas/" + conn.CASKeyItem,
					"--policy", "default/shop", "--service", "web", "--las", "http://$(HOST_IP):18766", "--out", "/run/cloister"},
				Env: []corev1.EnvVar{{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/run/cloister"},
					{Name: "cas-keys", MountPath: "/run/cloister-cas", ReadOnly: true}},
				SecurityContext: restricted(),
			}},
			Containers: []corev1.Container{{
				Name: "web", Image: pauseImg, ImagePullPolicy: corev1.PullNever,
				VolumeMounts:    []corev1.VolumeMount{{Name: "tls", MountPath: "/run/cloister", ReadOnly: true}},
				SecurityContext: restricted(),
			}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				{Name: "cas-keys", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: conn.SimulationConfigMap("cas")}}}}},
		}),
	}
	if _, err := e.cs.CoreV1().Pods("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "default", "web", "to run after its init container", 2*time.Minute, func(p *corev1.Pod) bool {
		if p.Status.Phase == corev1.PodFailed || (len(p.Status.InitContainerStatuses) > 0 && p.Status.InitContainerStatuses[0].RestartCount > 0) {
			out, _ := kubectl(t, e.c, "logs", "-n", "default", "web", "-c", "attest")
			prev, _ := kubectl(t, e.c, "logs", "-n", "default", "web", "-c", "attest", "--previous")
			t.Fatalf("the init container failed: %s\n%s\nits run before:\n%s", podSummary(p), out, prev)
		}
		return p.Status.Phase == corev1.PodRunning
	})
	files := podFiles(t, "/run/cloister", casclient.CertChainFile, casclient.RootCAFile, casclient.EnvFile)
	leaf := verifyChain(t, files[casclient.CertChainFile], files[casclient.RootCAFile], "web.shop.svc")
	if leaf.Subject.CommonName != "web.shop.default" {
		t.Errorf("subject %s, want web.shop.default (service web of policy default/shop)", leaf.Subject)
	}
	var claims string
	for _, ext := range leaf.Extensions {
		if ext.Id.Equal(pki.ClaimsOID) {
			claims = string(ext.Value)
		}
	}
	if !strings.Contains(claims, `"insecure":true`) || !strings.Contains(claims, `"type":"sim"`) {
		t.Errorf("claims in the certificate %q: LAS's simulated evidence must say insecure", claims)
	}
	if env := string(files[casclient.EnvFile]); !strings.HasPrefix(env, "TOKEN=") || len(strings.TrimSpace(env)) != len("TOKEN=")+32 {
		t.Errorf("the secret in the env file: %q", env)
	}
	t.Logf("the web pod attested through LAS at its node's address and started with %s, issued by %s", leaf.Subject, leaf.Issuer)
}

// podFiles reads files of dir in the container of a cloister-pause
// process that has them, from the host.
func podFiles(t *testing.T, dir string, names ...string) map[string][]byte {
	t.Helper()
	for _, line := range liveProcessesMentioning("cloister-pause") {
		pid, _, _ := strings.Cut(line, ":")
		root := filepath.Join("/proc", pid, "root", dir)
		out := map[string][]byte{}
		for _, n := range names {
			if data, err := os.ReadFile(filepath.Join(root, n)); err == nil {
				out[n] = data
			}
		}
		if len(out) == len(names) {
			return out
		}
	}
	t.Fatalf("no container has %s/%v", dir, names)
	return nil
}

// verifyChain checks a PEM chain against a root for dnsName; it returns
// the leaf.
func verifyChain(t *testing.T, chainPEM, rootPEM []byte, dnsName string) *x509.Certificate {
	t.Helper()
	var certs []*x509.Certificate
	for rest := chainPEM; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) || len(certs) == 0 {
		t.Fatalf("chain of %d certificates, root %q", len(certs), rootPEM)
	}
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: dnsName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("certificate for %s: %v", dnsName, err)
	}
	return certs[0]
}

// The operator killed right after a policy is applied: once it is back,
// the policy is HEALTHY and CAS holds the version once.
func testOperatorKilledWhileRegistering(t *testing.T, e *realNodeEnv) {
	file := e.signPolicy(t, "shop-v4", policyDoc(work.ownerPub, "96h"), work.owner, work.v2file)
	e.applyFile(t, file)
	time.Sleep(50 * time.Millisecond)
	e.op.kill(t)
	e.op.start(t)
	v4 := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "shop-v4", Namespace: "default"}}
	waitState(t, e.crs, v4, common.StateHealthy)
	h := e.casHistory(t, "cas")
	if len(h) != 3 || h[2] != v4.Status.Hash || v4.Status.Revision != 3 {
		t.Errorf("after the crash: history %v, status %+v: want the version once, as revision 3", h, v4.Status)
	}
}

// A CAS resource without spec.simulation: CAS cannot vouch for itself (no
// TEE here), its status says so, and it refuses a workload's simulated
// evidence even for a policy that allows simulation.
func testSimulationRefused(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	strict := simCAS("strict")
	strict.Spec.Simulation = false
	if err := e.crs.Create(ctx, strict); err != nil {
		t.Fatal(err)
	}
	c := waitCondition(t, e.crs, strict, health.IsHealthy, health.ReasonCASNotAttested)
	if strict.Status.State != common.StateUnhealthy || !strings.Contains(c.Message, "offers no evidence") {
		t.Errorf("a CAS without simulation: %s %q", strict.Status.State, c.Message)
	}
	// Trust it by its certificate, fetched as an owner would out of band.
	cfg, err := e.c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	dial, stop, err := conn.PortForward(ctx, cfg, "default", conn.PodName("strict"))
	if err != nil {
		t.Fatal(err)
	}
	insecure := &http.Client{Transport: &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // checks that an unauthenticated client gets nothing
	resp, err := insecure.Get("https://strict.default.svc:8081/v1/public-key")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	stop()
	var pk struct {
		TLSCertificate string `json:"tlsCertificate"`
		Evidence       any    `json:"evidence"`
	}
	if err := json.Unmarshal(body, &pk); err != nil || pk.TLSCertificate == "" || pk.Evidence != nil {
		t.Fatalf("public key of the strict CAS: %v %s", err, body)
	}
	ca := filepath.Join(work.dir, "strict.crt")
	if err := os.WriteFile(ca, []byte(pk.TLSCertificate), 0o644); err != nil {
		t.Fatal(err)
	}
	cas := []string{"--cluster", "default/strict", "--cas-ca", ca}
	initArgs := []string{"cas", "init", "--out", filepath.Join(work.dir, "strict-shares.json")}
	for _, k := range work.recoveryKeys {
		initArgs = append(initArgs, "--recovery-owner", k+".pub")
	}
	e.mustCLI(t, append(initArgs, cas...)...)
	// A policy only simulated evidence could meet is refused at once; with
	// a measured identity it registers, and simulated evidence is still
	// refused at attestation.
	simOnly := e.signPolicy(t, "strict-shop-sim", policyDoc(work.ownerPub, "24h"), work.owner, "")
	if out, err := e.cli(append([]string{"cas", "register", simOnly}, cas...)...); err == nil || !strings.Contains(err.Error(), "no hardware identity, and this CAS does not accept simulated evidence") {
		t.Errorf("a simulated-only policy at a CAS without simulation: %v\n%s", err, out)
	}
	measured := strings.Replace(policyDoc(work.ownerPub, "24h"), "attestation: {identities: []}",
		"attestation: {identities: [{type: sgx, mrenclave: \""+strings.Repeat("ab", 32)+"\"}]}", 1)
	signed := e.signPolicy(t, "strict-shop", measured, work.owner, "")
	e.mustCLI(t, append([]string{"cas", "register", signed}, cas...)...)
	_, err = e.cli(append([]string{"cas", "attest", "--policy", "default/shop", "--service", "web", "--sim", "--out", filepath.Join(work.dir, "strict-out")}, cas...)...)
	if err == nil || !strings.Contains(err.Error(), "simulation: ") || !strings.Contains(err.Error(), "does not accept simulation") {
		t.Errorf("simulated evidence at a CAS without simulation: %v", err)
	}
}

// A CAS with persistence, on a volume the dev cluster's provisioner makes,
// its state on the API: its pod deleted, it unseals its seed from its
// node's slot and serves again with no owner acting; with sealing None,
// the CR says it needs recovery and two of three recovery owners recover
// it through the API server. Either way it is HEALTHY with the same root
// CA and secrets a workload got before.
func testCASRecovery(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	cas := simCAS("cas-db")
	cas.Spec.Persistence.Enabled = true
	// A developer's simulation key, named to CAS: the CLI's own quoter
	// signs with it. Any other key is refused.
	devKey := filepath.Join(work.dir, "dev-sim.pem")
	cas.Spec.SimulationKeys = []string{e.mustCLI(t, "policy", "keygen", "--out", devKey)}
	if err := e.crs.Create(ctx, cas); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, e.crs, cas, health.IsHealthy, health.ReasonCASUninitialized)
	shares := filepath.Join(work.dir, "db-shares.json")
	at := []string{"--cluster", "default/cas-db", "--insecure-simulated-cas"}
	var owners []string
	for _, k := range work.recoveryKeys {
		owners = append(owners, "--recovery-owner", k+".pub")
	}
	e.mustCLI(t, append(append([]string{"cas", "init", "--threshold", "2", "--out", shares}, at...), owners...)...)
	waitState(t, e.crs, cas, common.StateHealthy)
	signed := e.signPolicy(t, "db-shop", policyDoc(work.ownerPub, "24h"), work.owner, "")
	e.mustCLI(t, append([]string{"cas", "register", signed}, at...)...)
	forged := filepath.Join(work.dir, "forged-sim.pem")
	if _, err := e.cli(append([]string{"cas", "attest", "--policy", "default/shop", "--service", "web", "--sim", "--sim-key", forged, "--out", filepath.Join(work.dir, "forged")}, at...)...); err == nil ||
		!strings.Contains(err.Error(), "which is not pinned: a forged quote") {
		t.Errorf("a simulated quote signed by a key CAS does not pin: %v", err)
	}
	attestAs := func(dir string) map[string]string {
		e.mustCLI(t, append([]string{"cas", "attest", "--policy", "default/shop", "--service", "web", "--sim", "--sim-key", devKey, "--out", dir}, at...)...)
		out := map[string]string{}
		for _, f := range []string{casclient.RootCAFile, casclient.EnvFile} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			out[f] = string(b)
		}
		return out
	}
	before := attestAs(filepath.Join(work.dir, "db-before"))
	restart := func() {
		t.Helper()
		old, err := e.cs.CoreV1().Pods("default").Get(ctx, conn.PodName("cas-db"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.cs.CoreV1().Pods("default").Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitPod(t, "default", old.Name, "to run again", 2*time.Minute, func(p *corev1.Pod) bool {
			return p.UID != old.UID && p.Status.Phase == corev1.PodRunning
		})
	}

	// Sealed in its node's slot of the state (simulated sealing): the pod
	// deleted, CAS serves again with no owner acting, as the same CAS.
	deleted := time.Now()
	restart()
	e.waitPod(t, "default", conn.PodName("cas-db"), "to be ready", 2*time.Minute, podReady)
	t.Logf("CAS deleted and ready again, with no owner acting, in %s", time.Since(deleted).Round(100*time.Millisecond))
	waitState(t, e.crs, cas, common.StateHealthy)
	for f, v := range attestAs(filepath.Join(work.dir, "db-unsealed")) {
		if before[f] != v {
			t.Errorf("%s changed across a restart that unsealed the seed", f)
		}
	}

	// Without sealing, a restarted CAS waits for the owners' shares.
	if err := e.crs.Get(ctx, client.ObjectKeyFromObject(cas), cas); err != nil {
		t.Fatal(err)
	}
	cas.Spec.Sealing = servicesv1beta1.CASSealingNone
	if err := e.crs.Update(ctx, cas); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the CAS pod to run without a sealer", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, conn.PodName("cas-db"), metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		args := strings.Join(p.Spec.Containers[0].Args, " ")
		return p.Status.Phase == corev1.PodRunning && strings.Contains(args, "--sealer=none"), args, nil
	})
	c := waitCondition(t, e.crs, cas, health.IsHealthy, health.ReasonCASRecovery)
	if !strings.Contains(c.Message, "cloister cas recover --cluster default/cas-db") {
		t.Errorf("a CAS in recovery: %q", c.Message)
	}
	recover := func(key string) string {
		return e.mustCLI(t, append([]string{"cas", "recover", "--shares", shares, "--key", key}, at...)...)
	}
	if out := recover(work.recoveryKeys[2]); !strings.Contains(out, "1 more needed") {
		t.Errorf("first share: %s", out)
	}
	if out := recover(work.recoveryKeys[0]); !strings.Contains(out, "CAS is ready") {
		t.Errorf("second share: %s", out)
	}
	waitState(t, e.crs, cas, common.StateHealthy)
	after := attestAs(filepath.Join(work.dir, "db-after"))
	for f, v := range before {
		if after[f] != v {
			t.Errorf("%s changed across the restart and recovery", f)
		}
	}
	// Its claim (the shop's CAS has another) got the default class.
	var pvcs corev1.PersistentVolumeClaimList
	if err := e.crs.List(ctx, &pvcs, client.InNamespace("default"), client.MatchingLabels{"app.kubernetes.io/instance": "cas-cas-db"}); err != nil ||
		len(pvcs.Items) != 1 || pvcs.Items[0].Spec.StorageClassName == nil || *pvcs.Items[0].Spec.StorageClassName != "standard" {
		t.Errorf("claims: %v %+v", err, pvcs.Items)
	}
}

// waitLASPinned waits until the CAS called name reports that it pins the
// simulation key of the real node's LAS: the operator read the key from
// the LAS pod, published it, and the ConfigMap reached the CAS pod.
func waitLASPinned(t testing.TB, e *realNodeEnv, name string) {
	t.Helper()
	waitFor(t, "CAS "+name+" to pin the real node's LAS key", 4*time.Minute, func(ctx context.Context) (bool, string, error) {
		var lases basev1beta1.LASList
		if err := e.crs.List(ctx, &lases); err != nil {
			return false, "", err
		}
		// A key the status still holds from a LAS pod that has since been
		// replaced is not the one the node's workloads get quotes from.
		pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-las",
			FieldSelector: "spec.nodeName=" + e.node.Name})
		if err != nil {
			return false, "", err
		}
		live := map[string]bool{}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.DeletionTimestamp == nil && podReady(p) {
				live[p.Name] = true
			}
		}
		var want []string
		for _, l := range lases.Items {
			if n, ok := l.Status.Nodes[e.node.Name]; ok && n.SimulationKey != "" {
				if !live[n.Pod] {
					return false, fmt.Sprintf("LAS %s's status names pod %s on %s, which is not a ready LAS pod there", l.Name, n.Pod, e.node.Name), nil
				}
				k, err := keyfile.ParsePublic([]byte(n.SimulationKey))
				if err != nil {
					return false, "", fmt.Errorf("LAS %s's key for %s: %w", l.Name, e.node.Name, err)
				}
				want = append(want, sim.Fingerprint(k))
			}
		}
		if len(want) == 0 {
			return false, "the operator has read no LAS key on " + e.node.Name + " yet", nil
		}
		cas := &servicesv1beta1.CAS{}
		if err := e.crs.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, cas); err != nil {
			return false, "", err
		}
		for _, w := range want {
			if !slices.Contains(cas.Status.SimulationKeys, w) {
				return false, fmt.Sprintf("CAS pins %v, not yet %s", cas.Status.SimulationKeys, w), nil
			}
		}
		return true, "", nil
	})
}

// casSimKeyFile writes the simulation key the operator made for the CAS
// called name (its status.simulationKey) into a file, for generate
// --cas-sim-key.
func casSimKeyFile(t *testing.T, e *realNodeEnv, name string) string {
	t.Helper()
	cas := &servicesv1beta1.CAS{}
	waitFor(t, "CAS "+name+"'s simulation key", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := e.crs.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, cas)
		return err == nil && cas.Status.SimulationKey != "", "status.simulationKey is empty", err
	})
	return writeFile(t, filepath.Join(e.dir, name+"-sim.pem"), cas.Status.SimulationKey)
}
