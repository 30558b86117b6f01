package generate

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/mesh/annotation"
)

const meshImage = "ghcr.io/cloister-cc/cloister-mesh@sha256:" + "9999999999999999999999999999999999999999999999999999999999999999"

func meshOptions() Options {
	o := options()
	o.MeshImage = meshImage
	return o
}

// annotate adds annotations to the web Deployment's pod template.
func annotate(in string, kv ...string) string {
	var b strings.Builder
	b.WriteString("      labels:\n        app: web\n      annotations:\n")
	for i := 0; i < len(kv); i += 2 {
		b.WriteString("        " + kv[i] + ": \"" + kv[i+1] + "\"\n") //nolint:gosec // kv comes in pairs
	}
	return strings.Replace(in, "      labels:\n        app: web\n", b.String(), 1)
}

// Contrast's documented mesh example, under its own annotation names.
var contrastMesh = annotate(threeTier,
	annotation.ContrastIngressAnnotation, "main#8001#false##metrics#8080#true",
	annotation.ContrastEgressAnnotation, "backend#127.0.0.2:4001#backend.default:4001")

func webPod(t *testing.T, out string) (corev1.PodSpec, map[string]string) {
	t.Helper()
	var web appsv1.Deployment
	doc(t, out, 0, &web)
	return web.Spec.Template.Spec, web.Spec.Template.Annotations
}

func TestMeshInjected(t *testing.T) {
	out, res := rewrite(t, contrastMesh, meshOptions())
	pod, _ := webPod(t, out)
	names := []string{}
	for _, c := range pod.InitContainers {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != InitializerName+","+MeshRedirectName+","+MeshName {
		t.Fatalf("init containers %v", names)
	}
	redirect, proxy := pod.InitContainers[1], pod.InitContainers[2]
	if redirect.Image != meshImage || strings.Join(redirect.Args, " ") != "redirect --ingress=main#8001#false##metrics#8080#true" ||
		redirect.RestartPolicy != nil || strings.Join(capabilities(redirect.SecurityContext.Capabilities.Add), ",") != "NET_ADMIN" {
		t.Errorf("redirect %+v", redirect)
	}
	if strings.Join(proxy.Args, " ") != "proxy --ingress=main#8001#false##metrics#8080#true --egress=backend#127.0.0.2:4001#backend.default:4001" ||
		proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("proxy %+v", proxy)
	}
	if p := proxy.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.IntValue() != annotation.AdminPort {
		t.Errorf("startup probe %+v", proxy.StartupProbe)
	}
	if sc := proxy.SecurityContext; len(sc.Capabilities.Add) != 0 || strings.Join(capabilities(sc.Capabilities.Drop), ",") != "ALL" {
		t.Errorf("the proxy's capabilities %+v", sc.Capabilities)
	}
	// The sidecar runs beside the app: its memory is the VM's too.
	if res.Workloads[0].MemoryMiB != 128+64+256 {
		t.Errorf("VM memory %d", res.Workloads[0].MemoryMiB)
	}
	twice, _ := rewrite(t, out, meshOptions())
	if twice != out {
		t.Errorf("a second run changed the output:\n%s\n----\n%s", out, twice)
	}
	// The configuration is in the proxy's arguments, so it is policy.
	other, res2 := rewrite(t, strings.Replace(contrastMesh, "metrics#8080#true", "metrics#8080#false", 1), meshOptions())
	if res2.Workloads[0].Digest == res.Workloads[0].Digest {
		t.Error("another mesh configuration, the same policy digest")
	}
	// Without the annotations, the mesh goes again.
	removed, _ := rewrite(t, strings.NewReplacer(annotation.ContrastIngressAnnotation, "x-ingress", annotation.ContrastEgressAnnotation, "x-egress").Replace(other), meshOptions())
	if pod, _ := webPod(t, removed); len(pod.InitContainers) != 1 {
		t.Errorf("after the annotations went: %+v", pod.InitContainers)
	}
}

func capabilities(cs []corev1.Capability) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

func TestMeshOptions(t *testing.T) {
	opts := meshOptions()
	opts.SkipServiceMesh = true
	out, _ := rewrite(t, contrastMesh, opts)
	if pod, _ := webPod(t, out); len(pod.InitContainers) != 1 {
		t.Errorf("skip-service-mesh injected %+v", pod.InitContainers)
	}
	// Ingress disabled: the proxy for the egress, no redirect.
	out, _ = rewrite(t, annotate(threeTier, annotation.IngressAnnotation, "DISABLED", annotation.EgressAnnotation, "db#127.0.0.3:5432#db.shop:5432"), meshOptions())
	if pod, _ := webPod(t, out); len(pod.InitContainers) != 2 || pod.InitContainers[1].Name != MeshName {
		t.Errorf("ingress disabled: %+v", pod.InitContainers)
	}
	skip := meshOptions()
	skip.SkipInitializer = true
	if _, _, err := Rewrite(context.Background(), []byte(contrastMesh), skip); err == nil || !strings.Contains(err.Error(), "need the initializer's certificates") {
		t.Errorf("a mesh without the initializer: %v", err)
	}
}

// A GPU pod as Contrast runs them (NVIDIA on Kata): the checks name what is missing; once complete, the
// VM's memory is default_memory and the annotations are policy.
func TestGPUPods(t *testing.T) {
	gpu := strings.Replace(threeTier, "          limits:\n            memory: 128Mi\n",
		"          limits:\n            memory: 128Mi\n            nvidia.com/GH100_H100_PCIE: 1\n", 1)
	withEnv := strings.Replace(gpu, "        image: nginx:1.27\n", "        image: nginx:1.27\n        env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n", 1)
	for _, tc := range []struct{ name, in, want string }{
		{"no NVIDIA_VISIBLE_DEVICES", annotate(gpu, "cdi.k8s.io/gpu", "nvidia.com/pgpu=0"), `containers[0] (web): requests a GPU but env NVIDIA_VISIBLE_DEVICES is not "all"`},
		{"no CDI annotation", withEnv, "no cdi.k8s.io/* annotation"},
		{"too little memory", annotate(withEnv, "cdi.k8s.io/gpu", "nvidia.com/pgpu=0", podpolicy.DefaultMemoryAnnotation, "64"),
			"default_memory is 64 MiB, less than the containers' memory limits (128 MiB)"},
		{"not a number", annotate(withEnv, "cdi.k8s.io/gpu", "nvidia.com/pgpu=0", podpolicy.DefaultMemoryAnnotation, "16G"), `"16G" must be the VM's memory in MiB`},
	} {
		if _, _, err := Rewrite(context.Background(), []byte(tc.in), options()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	out, res := rewrite(t, annotate(withEnv, "cdi.k8s.io/gpu", "nvidia.com/pgpu=0", podpolicy.DefaultMemoryAnnotation, "16384"), options())
	if res.Workloads[0].MemoryMiB != 16384 {
		t.Errorf("VM memory %d", res.Workloads[0].MemoryMiB)
	}
	_, annotations := webPod(t, out)
	p, _, err := podpolicy.FromAnnotation(annotations[podpolicy.Annotation])
	if err != nil || p.Annotations["cdi.k8s.io/gpu"] != "nvidia.com/pgpu=0" || p.Annotations[podpolicy.DefaultMemoryAnnotation] != "16384" {
		t.Errorf("policy annotations %v %v", p, err)
	}
	if annotations["cdi.k8s.io/gpu"] != "nvidia.com/pgpu=0" {
		t.Errorf("generate dropped the CDI annotation: %v", annotations)
	}
	// Without default_memory: a warning about the VM's size.
	_, res = rewrite(t, annotate(withEnv, "cdi.k8s.io/gpu", "nvidia.com/pgpu=0"), options())
	if w := res.Workloads[0].Warnings; len(w) != 1 || !strings.Contains(w[0], "a GPU pod's VM gets 384 MiB") {
		t.Errorf("warnings %q", w)
	}
}

// The kubelet's HTTP probes of meshed ports go through the proxy's admin
// port; probes of plain ports stay; a rerun, or the mesh taken out, gives
// the pod its own probes back.
func TestMeshProbesRewritten(t *testing.T) {
	probed := strings.Replace(contrastMesh, "        ports:\n        - containerPort: 8080\n",
		"        ports:\n        - {name: main, containerPort: 8001}\n"+
			"        readinessProbe: {httpGet: {path: /ready, port: main}}\n"+
			"        livenessProbe: {httpGet: {path: /metrics, port: 8080}}\n", 1)
	out, _ := rewrite(t, probed, meshOptions())
	pod, _ := webPod(t, out)
	web, proxy := pod.Containers[0], pod.InitContainers[2]
	if r := web.ReadinessProbe.HTTPGet; r.Path != "/app-health/web/readiness" || r.Port.IntValue() != annotation.AdminPort || r.Scheme != corev1.URISchemeHTTP {
		t.Errorf("the meshed readiness probe: %+v", r)
	}
	if l := web.LivenessProbe.HTTPGet; l.Path != "/metrics" || l.Port.IntValue() != 8080 {
		t.Errorf("the plain port's liveness probe changed: %+v", l)
	}
	if want := "--app-probe=web/readiness=http://127.0.0.1:8001/ready"; !strings.Contains(strings.Join(proxy.Args, " "), want) {
		t.Errorf("proxy args %q lack %s", proxy.Args, want)
	}
	if again, _ := rewrite(t, out, meshOptions()); again != out {
		t.Errorf("a second run changed the probes:\n%s", again)
	}
	opts := meshOptions()
	opts.SkipServiceMesh = true
	plain, _ := rewrite(t, out, opts)
	pod, _ = webPod(t, plain)
	if r := pod.Containers[0].ReadinessProbe.HTTPGet; r.Path != "/ready" || r.Port.IntValue() != 8001 {
		t.Errorf("without the mesh, the readiness probe is %+v", r)
	}
}

// Every container reads the initializer's files by the pod's group.
func TestInitializerGroupShared(t *testing.T) {
	out, _ := rewrite(t, threeTier, options())
	pod, _ := webPod(t, out)
	if sc := pod.SecurityContext; sc == nil || len(sc.SupplementalGroups) != 1 || sc.SupplementalGroups[0] != 65532 {
		t.Errorf("pod security context %+v", sc)
	}
	withGroup := strings.Replace(threeTier, "      runtimeClassName: cloister-cc # made confidential by generate\n",
		"      runtimeClassName: cloister-cc # made confidential by generate\n      securityContext: {runAsGroup: 3000, supplementalGroups: [4000]}\n", 1)
	out, _ = rewrite(t, withGroup, options())
	pod, _ = webPod(t, out)
	if got := pod.SecurityContext.SupplementalGroups; len(got) != 2 || got[0] != 4000 || got[1] != 3000 {
		t.Errorf("supplemental groups %v, want [4000 3000]", got)
	}
}
