//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/mesh/redirect"
	"github.com/cloister-cc/cloister/internal/workload/generate"
)

// meshApp is the mesh test's app (test/e2e/meshapp), built and imported
// on the real node with Cloister's images.
const meshApp = "meshapp"

// Contrast's documented service mesh example: app serves main (8001, TLS) and
// metrics (8080, plain) and reaches backend through 127.0.0.2:4001; the
// backend's every port needs mTLS; client is another meshed pod.
const meshPods = `apiVersion: v1
kind: Service
metadata: {name: backend, namespace: default}
spec: {selector: {app: backend}, ports: [{port: 4001}]}
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: default}
spec: {selector: {app: app}, ports: [{port: 8001}]}
---
apiVersion: v1
kind: Service
metadata: {name: client, namespace: default}
spec: {selector: {app: client}, ports: [{port: 9000}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: backend
  namespace: default
  labels: {app: backend}
  annotations: {cloister.dev/servicemesh-ingress: ""}
spec:
  runtimeClassName: cloister-cc
  nodeSelector: {NODE_LABEL: "true"}
  hostAliases: [{ip: CAS_IP, hostnames: [cas-shop.default.svc]}]
  containers:
  - name: backend
    image: MESHAPP
    args: [serve, --name, backend, --port, "4001"]
    resources: {limits: {memory: 32Mi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: app
  namespace: default
  labels: {app: app}
  annotations:
    contrast.edgeless.systems/servicemesh-ingress: "main#8001#false##metrics#8080#true"
    contrast.edgeless.systems/servicemesh-egress: "backend#127.0.0.2:4001#backend.default:4001"
    cloister.dev/port-forward: "8080"
spec:
  runtimeClassName: cloister-cc
  nodeSelector: {NODE_LABEL: "true"}
  hostAliases:
  - {ip: CAS_IP, hostnames: [cas-shop.default.svc]}
  - {ip: BACKEND_IP, hostnames: [backend.default]}
  containers:
  - name: app
    image: MESHAPP
    args: [serve, --name, app, --port, "8001", --port, "8080"]
    resources: {limits: {memory: 32Mi}}
    # A probe of the meshed TLS port: generate sends it through the proxy.
    readinessProbe: {httpGet: {path: /, port: 8001}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: default
  labels: {app: client}
  annotations: {cloister.dev/servicemesh-ingress: DISABLED}
spec:
  runtimeClassName: cloister-cc
  nodeSelector: {NODE_LABEL: "true"}
  hostAliases: [{ip: CAS_IP, hostnames: [cas-shop.default.svc]}]
  containers:
  - name: client
    image: MESHAPP
    args: [serve, --name, client, --port, "9000"]
    resources: {limits: {memory: 32Mi}}
    # Another user than the initializer's (65532): it reads the
    # certificates by the pod's group.
    securityContext: {runAsUser: 1000, runAsGroup: 1000}
`

// outsider runs the app without the mesh, on the same node.
const outsiderPod = `apiVersion: v1
kind: Pod
metadata: {name: outsider, namespace: default}
spec:
  nodeSelector: {NODE_LABEL: "true"}
  containers:
  - name: outsider
    image: MESHAPP
    args: [serve, --name, outsider, --port, "9000"]
`

// testServiceMesh runs Contrast's documented mesh example on the real node against
// the CAS (and its manifest history) of the confidential workloads step.
func testServiceMesh(t *testing.T, e *realNodeEnv, casIP string) {
	ctx := context.Background()
	ws, resources := filepath.Join(e.dir, "mesh-workspace"), filepath.Join(e.dir, "mesh-resources")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(resources, 0o755); err != nil {
		t.Fatal(err)
	}
	writeDigestCache(t, e, ws)
	r := strings.NewReplacer("NODE_LABEL", cluster.LabelRealNode, "CAS_IP", casIP, "MESHAPP", imageRef(meshApp))
	file := writeFile(t, filepath.Join(resources, "mesh.yaml"), r.Replace(meshPods))
	e.mustCLI(t, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t, e, "cas-shop"), "--offline", "--workspace", ws, "--policy", "mesh",
		"--cas-address", "cas-shop.default.svc:8081", "--initializer-image", imageRef("cloister-initializer"),
		"--mesh-image", imageRef("cloister-mesh"), resources)
	generated := mustRead(t, file)
	if strings.Count(generated, "name: "+generate.MeshName+"\n") != 3 || strings.Count(generated, "name: "+generate.MeshRedirectName+"\n") != 2 {
		t.Fatalf("generate did not inject the mesh as annotated:\n%s", generated)
	}
	at := []string{"--cluster", "default/cas-shop", "--insecure-simulated-cas"}
	// A new name at a CAS the shop's workspace initialised: its seed share
	// owner, on the board, approves it.
	board := filepath.Join(e.dir, "shop-workspace", generate.SeedShareOwnerFile)
	if out := e.mustCLI(t, append(append([]string{"set"}, at...), "--workspace", ws, "--board-key", board, resources)...); !strings.Contains(out, "manifest mesh set: version 1") {
		t.Fatalf("set: %s", out)
	}
	// The backend first: the app's host alias needs its address, which
	// is not part of any policy.
	docs := strings.Split(generated, "\n---\n")
	var backendDoc, rest []string
	forwarder := ""
	for _, d := range docs {
		switch {
		case strings.Contains(d, "kind: Service") || strings.Contains(d, "kind: Pod") && strings.Contains(d, "\n  name: backend\n"):
			backendDoc = append(backendDoc, d)
		case strings.Contains(d, generate.ForwarderFor):
			forwarder = d
		default:
			rest = append(rest, d)
		}
	}
	if forwarder == "" {
		t.Fatalf("generate added no port forwarder:\n%s", generated)
	}
	e.applyFile(t, writeFile(t, filepath.Join(e.dir, "mesh-backend.yaml"), strings.Join(backendDoc, "\n---\n")))
	backend := e.waitPod(t, "default", "backend", "to run with its mesh", 3*time.Minute, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
	})
	e.applyFile(t, writeFile(t, filepath.Join(e.dir, "mesh-rest.yaml"), strings.ReplaceAll(strings.Join(rest, "\n---\n"), "BACKEND_IP", backend.Status.PodIP)))
	e.applyFile(t, writeFile(t, filepath.Join(e.dir, "outsider.yaml"), r.Replace(outsiderPod)))
	pods := map[string]*corev1.Pod{"backend": backend}
	for _, name := range []string{"app", "client", "outsider"} {
		pods[name] = e.waitPod(t, "default", name, "to run", 3*time.Minute, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
		})
	}
	app := pods["app"].Status.PodIP
	// The probe of the meshed TLS port passes through the proxy's admin
	// port: the app becomes ready.
	e.waitPod(t, "default", "app", "to be ready by its probe of the meshed port", 2*time.Minute, func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	get := func(pod string, args ...string) (string, error) {
		return kubectl(t, e.c, append([]string{"exec", "-n", "default", pod, "-c", pod, "--", path.Join(image.BinDir, meshApp), "get"}, args...)...)
	}
	ca := []string{"--ca", "/cloister/tls-config/mesh-ca.pem"}

	// main over TLS, verified with the mesh CA, from another meshed pod
	// (once the app listens: Running says its process started).
	waitFor(t, "main to answer over TLS from another meshed pod", 30*time.Second, func(ctx context.Context) (bool, string, error) {
		out, err := get("client", append(ca, "--servername", "app.default", "https://"+app+":8001/")...)
		return err == nil && strings.Contains(out, "app 8001") && strings.Contains(out, "server certificate: default-pod-app.mesh"), out, nil
	})
	// metrics in plain text.
	if out, err := get("client", "http://"+app+":8080/"); err != nil || !strings.Contains(out, "app 8080") {
		t.Errorf("metrics in plain text: %v\n%s", err, out)
	}
	// The client, another user than the initializer, reads its own
	// certificate and key: the backend admits it by them.
	if out, err := get("client", append(ca, "--cert", "/cloister/tls-config/certChain.pem", "--key", "/cloister/tls-config/key.pem",
		"--servername", "backend.default", "https://"+backend.Status.PodIP+":4001/")...); err != nil || !strings.Contains(out, "backend 4001") {
		t.Errorf("the client (user 1000) with its own certificate: %v\n%s", err, out)
	}
	// kubectl port-forward cannot reach into a confidential VM; it reaches
	// the port forwarder, which relays to the app.
	testPortForwarder(t, e, forwarder, app)
	// Plain HTTP to main fails.
	if out, err := get("client", "http://"+app+":8001/"); err == nil || strings.Contains(out, "app 8001") {
		t.Errorf("plain HTTP to main answered: %s", out)
	}
	// The app reaches the backend at 127.0.0.2:4001: its egress opens
	// mTLS, the backend's ingress sees the app's workload certificate.
	out, err := get("client", append(ca, "--servername", "app.default", "https://"+app+":8001/call?addr=127.0.0.2:4001")...)
	if err != nil || !strings.Contains(out, "backend 4001") {
		t.Errorf("app -> backend through the mesh: %v\n%s", err, out)
	}
	waitFor(t, "the backend's ingress to log the app's identity", time.Minute, func(ctx context.Context) (bool, string, error) {
		logs, _ := kubectl(t, e.c, "logs", "-n", "default", "backend", "-c", generate.MeshName)
		return strings.Contains(logs, `"peer":"spiffe://cas-`) && strings.Contains(logs, `.cloister/policy/mesh/service/default-pod-app"`), logs, nil
	})
	// A pod without a mesh certificate is refused by the backend.
	backendURL := "https://" + backend.Status.PodIP + ":4001/"
	if out, err := get("outsider", "--insecure", backendURL); err == nil || !strings.Contains(out, "certificate required") {
		t.Errorf("a pod without a mesh certificate: %v\n%s", err, out)
	}
	if out, err := get("outsider", "http://"+backend.Status.PodIP+":4001/"); err == nil {
		t.Errorf("plain HTTP to the backend answered: %s", out)
	}
	// A workload of another policy of the same CAS has a certificate of the
	// same mesh CA, but the backend's policy admits only its own policy's
	// callers: its mTLS does not complete.
	intruder := intruderCertificate(t, e, at, board)
	outsiderRoot := containerRoot(t, "outsider")
	for _, f := range []string{casclient.CertChainFile, casclient.KeyFile} {
		if err := os.WriteFile(filepath.Join(outsiderRoot, "intruder-"+f), mustReadBytes(t, filepath.Join(intruder, f)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := get("outsider", "--insecure", "--cert", "/intruder-"+casclient.CertChainFile, "--key", "/intruder-"+casclient.KeyFile, backendURL); err == nil || strings.Contains(out, "backend 4001") {
		t.Errorf("a workload of another policy reached the backend: %v\n%s", err, out)
	}
	waitFor(t, "the backend's ingress to refuse the other policy's workload by its identity", time.Minute, func(ctx context.Context) (bool, string, error) {
		logs, _ := kubectl(t, e.c, "logs", "-n", "default", "backend", "-c", generate.MeshName)
		return strings.Contains(logs, "/policy/intruder/service/intruder is not among the callers"), logs, nil
	})

	// Rotation: the app's files replaced (here by the client's
	// certificate, as the initializer would write a new one) are served
	// to the next connection, without a restart.
	appRoot, clientRoot := containerRoot(t, "app"), containerRoot(t, "client")
	for _, f := range []string{"certChain.pem", "key.pem"} {
		replaceFile(t, filepath.Join(clientRoot, "cloister/tls-config", f), filepath.Join(appRoot, "cloister/tls-config", f))
	}
	out, err = get("client", append(ca, "--servername", "client.default", "https://"+app+":8001/")...)
	if err != nil || !strings.Contains(out, "server certificate: default-pod-client.mesh") {
		t.Errorf("after the rotation: %v\n%s", err, out)
	}
	if p, _ := e.cs.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{}); p != nil {
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == generate.MeshName && s.RestartCount != 0 {
				t.Errorf("the proxy restarted: %+v", s)
			}
		}
	}

	// The redirect lives in the pods' namespaces: none on the host, gone
	// with the pods.
	if n := namespacesWithRedirect(t); n != 2 {
		t.Errorf("%d network namespaces with the redirect, want 2 (app and backend)", n)
	}
	for _, name := range []string{"app", "backend", "client", "outsider", generate.ForwarderPrefix + "app"} {
		if err := e.cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitFor(t, "the mesh pods to be gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		left := []string{}
		for _, name := range []string{"app", "backend", "client", "outsider"} {
			if _, err := e.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, name)
			}
		}
		return len(left) == 0, fmt.Sprint(left), nil
	})
	waitFor(t, "no network namespace on the node to hold the redirect", time.Minute, func(ctx context.Context) (bool, string, error) {
		n := namespacesWithRedirect(t)
		return n == 0, fmt.Sprint(n), nil
	})
}

// containerRoot is the root folder of the mesh test's app container
// named name, as the host sees it.
func containerRoot(t *testing.T, name string) string {
	t.Helper()
	cmd := "serve\x00--name\x00" + name + "\x00" // a command line's arguments end in NULs
	for _, line := range liveProcessesMentioning(cmd) {
		pid, _, _ := strings.Cut(line, ":")
		return filepath.Join("/proc", pid, "root")
	}
	t.Fatalf("no process runs meshapp serve --name %s", name)
	return ""
}

// replaceFile writes src over dst as the initializer does: a new file,
// owned like the old, renamed into place.
func replaceFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	uid, gid := fileOwner(info)
	if err := os.Chown(tmp, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// namespacesWithRedirect counts the host's network namespaces (those of
// its processes) that hold the mesh's nftables table.
func namespacesWithRedirect(t *testing.T) int {
	t.Helper()
	seen, n := map[string]bool{}, 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err != nil || seen[link] {
			continue
		}
		seen[link] = true
		f, err := os.Open(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err != nil {
			continue
		}
		conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
		if err == nil {
			if present, err := redirect.Present(conn); err == nil && present {
				n++
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func fileOwner(info os.FileInfo) (int, int) {
	st := info.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

// intruderCertificate registers policy intruder at cas-shop (its own
// owner, the board's approval of its name) and attests as its one
// service through the real node's LAS, from the host; it returns the
// folder of the workload certificate and key.
func intruderCertificate(t *testing.T, e *realNodeEnv, at []string, board string) string {
	t.Helper()
	dir := filepath.Join(e.dir, "intruder")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	owner := filepath.Join(dir, "owner.pem")
	ownerPub := e.mustCLI(t, "policy", "keygen", "--out", owner)
	doc := writeFile(t, filepath.Join(dir, "policy.yaml"), "version: cloister.dev/policy/v1\nname: intruder\nowners:\n  keys:\n  - |\n"+indent(ownerPub, "    ")+
		"allowSimulation: true\nservices:\n- name: intruder\n  attestation: {identities: []}\n  certificate: {sans: [intruder.default.svc]}\n")
	signed := writeFile(t, filepath.Join(dir, "signed.yaml"), e.mustCLI(t, "policy", "sign", "--key", owner, "--version", "1", "--cas-address", "cas-shop.default.svc:8081", doc))
	signed = writeFile(t, filepath.Join(dir, "approved.yaml"), e.mustCLI(t, "policy", "sign", "--key", board, signed))
	e.mustCLI(t, append([]string{"cas", "register", signed}, at...)...)
	var lasIP string
	waitFor(t, "the LAS pod's address", time.Minute, func(ctx context.Context) (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-las"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err, pods), nil
		}
		lasIP = pods.Items[0].Status.PodIP
		return podReady(&pods.Items[0]) && lasIP != "", podSummary(&pods.Items[0]), nil
	})
	out := filepath.Join(dir, "out")
	e.mustCLI(t, append([]string{"cas", "attest", "--policy", "intruder", "--service", "intruder", "--las", "http://" + lasIP + ":18766", "--out", out}, at...)...)
	return out
}

func mustReadBytes(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testPortForwarder runs the forwarder generate wrote for the app on the
// real node (there is no cluster DNS: a host alias names the app's
// Service), and reaches the app's plain port through kubectl
// port-forward to it.
func testPortForwarder(t *testing.T, e *realNodeEnv, doc, appIP string) {
	t.Helper()
	doc = strings.Replace(doc, "\nspec:\n", "\nspec:\n  nodeSelector: {"+cluster.LabelRealNode+": \"true\"}\n"+
		"  hostAliases: [{ip: "+appIP+", hostnames: [app.default.svc]}]\n", 1)
	e.applyFile(t, writeFile(t, filepath.Join(e.dir, "port-forwarder.yaml"), doc))
	name := generate.ForwarderPrefix + "app"
	e.waitPod(t, "default", name, "to run", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	if p, _ := e.cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); p != nil && p.Spec.RuntimeClassName != nil {
		t.Errorf("the forwarder runs in runtime class %s, want an ordinary pod", *p.Spec.RuntimeClassName)
	}
	local, stop := kubectlPortForward(t, e.c, "default", name, 8080)
	defer stop()
	waitFor(t, "the app to answer through kubectl port-forward to its forwarder", 30*time.Second, func(ctx context.Context) (bool, string, error) {
		resp, err := http.Get("http://" + local + "/")
		if err != nil {
			return false, err.Error(), nil
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "app 8080"), string(body), nil
	})
}

// kubectlPortForward runs kubectl port-forward to a pod's port on a
// local port kubectl picks, until stop.
func kubectlPortForward(t *testing.T, c *cluster.Cluster, namespace, pod string, port int) (local string, stop func()) {
	t.Helper()
	cmd := exec.Command(tools(t).Path("kubectl"), "--kubeconfig", c.KubeconfigPath(), "port-forward", "--address", "127.0.0.1", "-n", namespace, "pod/"+pod, fmt.Sprintf(":%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			// "Forwarding from 127.0.0.1:41234 -> 8080"
			if rest, ok := strings.CutPrefix(sc.Text(), "Forwarding from "); ok {
				addr, _, _ := strings.Cut(rest, " ")
				found <- addr
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case local = <-found:
		return local, stop
	case <-time.After(30 * time.Second):
		stop()
		t.Fatalf("kubectl port-forward to %s/%s did not start: %s", namespace, pod, stderr.String())
		return "", nil
	}
}
