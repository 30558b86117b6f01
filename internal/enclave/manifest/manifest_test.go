package manifest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
)

func spec(mod ...func(*enclavev1beta1.NitroEnclaveDeploymentSpec)) *enclavev1beta1.NitroEnclaveDeploymentSpec {
	s := &enclavev1beta1.NitroEnclaveDeploymentSpec{
		UserPlugins: []enclavev1beta1.UserPlugin{{
			Name: "api", Image: "registry.example/api@sha256:" + strings.Repeat("a", 64), Args: []string{"--port", "8443"},
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "prod"}},
			Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}},
		}},
	}
	for _, m := range mod {
		m(s)
	}
	return s
}

func TestFromSpecDefaultsAndRoundTrip(t *testing.T) {
	m, err := FromSpec(spec())
	if err != nil {
		t.Fatal(err)
	}
	if m.Enclave != (Size{CPUs: DefaultCPUs, MemoryMiB: DefaultMemoryMiB}) || m.Plugins[0].RestartPolicy != "Always" || m.Plugins[0].Ports[0].Protocol != "TCP" {
		t.Errorf("defaults: %+v", m)
	}
	again, err := Parse(m.JSON())
	if err != nil || string(again.JSON()) != string(m.JSON()) {
		t.Errorf("round trip: %v\n%s\n%s", err, m.JSON(), again.JSON())
	}
}

// What the enclave boots with needs a new enclave; the rest does not.
func TestBootDigest(t *testing.T) {
	base, _ := FromSpec(spec())
	for _, tc := range []struct {
		name    string
		mod     func(*enclavev1beta1.NitroEnclaveDeploymentSpec)
		newBoot bool
	}{
		{"another image", func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) {
			s.UserPlugins[0].Image = strings.Replace(s.UserPlugins[0].Image, "aaaa", "bbbb", 1)
		}, true},
		{"more memory", func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) { s.Enclave.MemoryMiB = 4096 }, true},
		{"debug mode", func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) { s.Enclave.Debug = true }, true},
		{"another plugin", func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) {
			s.UserPlugins = append(s.UserPlugins, enclavev1beta1.UserPlugin{Name: "cache", Image: s.UserPlugins[0].Image})
		}, true},
		{"another env value", func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) { s.UserPlugins[0].Env[0].Value = "debug" }, false},
		{"other args", func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) { s.UserPlugins[0].Args = []string{"--port", "9443"} }, false},
		{"another restart policy", func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) {
			s.UserPlugins[0].RestartPolicy = corev1.RestartPolicyNever
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := FromSpec(spec(tc.mod))
			if err != nil {
				t.Fatal(err)
			}
			if got := m.BootDigest() != base.BootDigest(); got != tc.newBoot {
				t.Errorf("new boot digest %v, want %v", got, tc.newBoot)
			}
			if string(m.JSON()) == string(base.JSON()) {
				t.Error("the manifest did not change")
			}
		})
	}
}

func TestRefuses(t *testing.T) {
	_, err := FromSpec(spec(func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) {
		s.UserPlugins[0].Env = append(s.UserPlugins[0].Env, corev1.EnvVar{Name: "TOKEN",
			ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "t"}}})
	}))
	if err == nil || !strings.Contains(err.Error(), "spec.userPlugins[0] (api): env TOKEN takes its value from the cluster") {
		t.Errorf("valueFrom: %v", err)
	}
	if _, err := FromSpec(spec(func(s *enclavev1beta1.NitroEnclaveDeploymentSpec) { s.UserPlugins = nil })); err == nil {
		t.Error("no plugins accepted")
	}
	for _, bad := range []string{`{"version":"other/v9","enclave":{},"plugins":[]}`, `{"version":"` + Version + `","extra":1}`, `not json`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("parsed %s", bad)
		}
	}
}

// Whatever arrives over vsock as a manifest, Parse returns one of this
// schema whose canonical encoding reads back the same, or an error.
func FuzzParse(f *testing.F) {
	m, err := FromSpec(spec())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(m.JSON())
	f.Add([]byte(`{"version":"` + Version + `","extra":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		if m.Version != Version {
			t.Fatalf("accepted version %q", m.Version)
		}
		again, err := Parse(m.JSON())
		if err != nil || string(again.JSON()) != string(m.JSON()) {
			t.Fatalf("%q does not read back: %v", data, err)
		}
	})
}
