package podpolicy

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

const img = "registry.example/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func pod(mod ...func(*corev1.PodSpec)) *corev1.PodSpec {
	s := &corev1.PodSpec{
		Containers: []corev1.Container{{Name: "web", Image: img, Args: []string{"--port", "8080"},
			Env: []corev1.EnvVar{{Name: "MODE", Value: "prod"}}}},
		Volumes: []corev1.Volume{
			{Name: "a", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		},
	}
	for _, m := range mod {
		m(s)
	}
	return s
}

func of(s *corev1.PodSpec) (*Policy, error) { return Of(s, nil) }

func digestOf(t *testing.T, s *corev1.PodSpec) string {
	t.Helper()
	p, err := of(s)
	if err != nil {
		t.Fatal(err)
	}
	_, d := p.Initdata()
	return d
}

// What the policy covers changes the digest; what the host decides does
// not.
func TestDigestCoversWhatThePodRuns(t *testing.T) {
	base := digestOf(t, pod())
	for _, tc := range []struct {
		name    string
		mod     func(*corev1.PodSpec)
		changes bool
	}{
		{"another image", func(s *corev1.PodSpec) { s.Containers[0].Image = strings.Replace(img, "0123", "fff0", 1) }, true},
		{"another argument", func(s *corev1.PodSpec) { s.Containers[0].Args[1] = "9090" }, true},
		{"a command", func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"/bin/sh"} }, true},
		{"another env value", func(s *corev1.PodSpec) { s.Containers[0].Env[0].Value = "debug" }, true},
		{"a mount", func(s *corev1.PodSpec) {
			s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "a", MountPath: "/data"}}
		}, true},
		{"privileged", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, true},
		{"another ConfigMap", func(s *corev1.PodSpec) { s.Volumes[1].ConfigMap.Name = "other" }, true},
		{"host network", func(s *corev1.PodSpec) { s.HostNetwork = true }, true},
		{"an init container", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", Image: img}}
		}, true},
		{"volumes reordered", func(s *corev1.PodSpec) { s.Volumes[0], s.Volumes[1] = s.Volumes[1], s.Volumes[0] }, false},
		{"resources", func(s *corev1.PodSpec) {
			s.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}, false},
		{"node selector", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"zone": "b"} }, false},
		{"service account", func(s *corev1.PodSpec) { s.ServiceAccountName = "web" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := digestOf(t, pod(tc.mod)); (got != base) != tc.changes {
				t.Errorf("digest changed: %v, want %v", got != base, tc.changes)
			}
		})
	}
}

func TestUnpinnedImageNamesTheContainer(t *testing.T) {
	_, err := of(pod(func(s *corev1.PodSpec) {
		s.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox:1.37"}}
	}))
	if err == nil || !strings.Contains(err.Error(), "initContainers[0] (setup)") || !strings.Contains(err.Error(), `"busybox:1.37"`) {
		t.Fatalf("error %v", err)
	}
}

func TestAnnotationRoundTrip(t *testing.T) {
	p, err := of(pod())
	if err != nil {
		t.Fatal(err)
	}
	value, digest := p.AnnotationValue()
	again, digest2 := p.AnnotationValue()
	if value != again || digest != digest2 {
		t.Fatal("encoding the same policy twice gave different bytes")
	}
	got, gotDigest, err := FromAnnotation(value)
	if err != nil {
		t.Fatal(err)
	}
	if gotDigest != digest || !bytes.Equal(got.Canonical(), p.Canonical()) {
		t.Errorf("round trip: digest %s want %s\n%s\n%s", gotDigest, digest, got.Canonical(), p.Canonical())
	}
	doc, _ := p.Initdata()
	if !strings.HasPrefix(string(doc), "version = \"0.1.0\"\nalgorithm = \"sha256\"\n") {
		t.Errorf("initdata document:\n%s", doc)
	}
}

func TestFromAnnotationRefuses(t *testing.T) {
	wrap := func(doc string) string {
		var b bytes.Buffer
		z := gzip.NewWriter(&b)
		if _, err := z.Write([]byte(doc)); err != nil {
			t.Fatal(err)
		}
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(b.Bytes())
	}
	for _, tc := range []struct{ name, value, want string }{
		{"not base64", "%%%", "not base64"},
		{"not gzip", base64.StdEncoding.EncodeToString([]byte("plain")), "not gzip"},
		{"unknown key", wrap("version = \"0.1.0\"\nalgorithm = \"sha256\"\nextra = 1\n[data]\n"), "unknown key extra"},
		{"other algorithm", wrap("version = \"0.1.0\"\nalgorithm = \"sha384\"\n[data]\n"), `algorithm "sha384"`},
		{"no policy", wrap("version = \"0.1.0\"\nalgorithm = \"sha256\"\n[data]\n\"policy.rego\" = \"x\"\n"), "holds no cloister-policy.json"},
		{"unknown policy field", wrap("version = \"0.1.0\"\nalgorithm = \"sha256\"\n[data]\n\"cloister-policy.json\" = '{\"version\":\"cloister.dev/pod-policy/v1\",\"x\":1}'\n"), "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := FromAnnotation(tc.value); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestWarningsNameHostSuppliedValues(t *testing.T) {
	p, err := of(pod(func(s *corev1.PodSpec) {
		s.Containers[0].Env = append(s.Containers[0].Env,
			corev1.EnvVar{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "pw"}}},
			corev1.EnvVar{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "l"}}})
	}))
	if err != nil {
		t.Fatal(err)
	}
	w := p.Warnings()
	if len(w) != 2 || !strings.Contains(w[0], "env PASSWORD comes from Secret db") || !strings.Contains(w[1], "ConfigMap cfg") {
		t.Errorf("warnings %q", w)
	}
	plain, _ := of(pod())
	if w := plain.Warnings(); len(w) != 0 {
		t.Errorf("warnings for literal values: %q", w)
	}
}

func TestCheckARunningPod(t *testing.T) {
	p, err := of(pod())
	if err != nil {
		t.Fatal(err)
	}
	// What the API server adds is not a departure.
	running := pod(func(s *corev1.PodSpec) {
		s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
		s.Containers[0].TerminationMessagePath = "/dev/termination-log"
		s.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	})
	if err := p.Check(running, nil); err != nil {
		t.Fatalf("a pod as the API server stores it: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*corev1.PodSpec)
		want string
	}{
		{"another image", func(s *corev1.PodSpec) { s.Containers[0].Image = "evil@sha256:" + strings.Repeat("e", 64) }, `containers[0] (web): image "evil@sha256:eee`},
		{"another argument", func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"--debug"} }, "args"},
		{"an extra env", func(s *corev1.PodSpec) {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/x.so"})
		}, "env LD_PRELOAD is not in the policy"},
		{"another env value", func(s *corev1.PodSpec) { s.Containers[0].Env[0].Value = "debug" }, `env MODE is "debug", the policy has "prod"`},
		{"an extra container", func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "spy", Image: img})
		}, "containers: 2, the policy has 1"},
		{"privileged", func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, "privileged true"},
		{"host network", func(s *corev1.PodSpec) { s.HostNetwork = true }, "host namespaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := p.Check(pod(tc.mod), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// The VM's devices and memory are policy; other annotations are not.
func TestAnnotationsThatShapeTheVM(t *testing.T) {
	gpu := map[string]string{"cdi.k8s.io/gpu": "nvidia.com/pgpu=0", DefaultMemoryAnnotation: "16384", "team": "ml"}
	p, err := Of(pod(), gpu)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Annotations) != 2 || p.Annotations["team"] != "" {
		t.Errorf("attested annotations %v", p.Annotations)
	}
	plain, _ := of(pod())
	_, withGPU := p.Initdata()
	_, without := plain.Initdata()
	if withGPU == without {
		t.Error("the GPU annotation does not change the digest")
	}
	other, _ := Of(pod(), map[string]string{"cdi.k8s.io/gpu": "nvidia.com/pgpu=0", DefaultMemoryAnnotation: "16384", "team": "web"})
	if _, d := other.Initdata(); d != withGPU {
		t.Error("an unrelated annotation changed the digest")
	}
	if err := p.Check(pod(), map[string]string{"cdi.k8s.io/gpu": "nvidia.com/pgpu=0", DefaultMemoryAnnotation: "16384", "x": "y"}); err != nil {
		t.Errorf("the same VM annotations: %v", err)
	}
	if err := p.Check(pod(), map[string]string{"cdi.k8s.io/gpu": "nvidia.com/pgpu=1", DefaultMemoryAnnotation: "16384"}); err == nil || !strings.Contains(err.Error(), "annotations") {
		t.Errorf("another GPU: %v", err)
	}
	if err := plain.Check(pod(), map[string]string{DefaultMemoryAnnotation: "512"}); err == nil {
		t.Error("a memory annotation the policy lacks passed")
	}
}
