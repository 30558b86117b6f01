package podpolicy

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	corev1 "k8s.io/api/core/v1"
)

// The initdata carries the agent's policy made from the pod's, so the
// digest CAS checks covers what the guest enforces; a document whose
// agent policy is another is refused.
func TestInitdataCarriesTheAgentPolicy(t *testing.T) {
	p, err := of(pod())
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := p.Initdata()
	var d initdata
	if _, err := toml.Decode(string(doc), &d); err != nil {
		t.Fatal(err)
	}
	if d.Data[RegoKey] != string(p.Rego()) {
		t.Fatalf("the initdata's %s is not the policy's Rego", RegoKey)
	}
	if !strings.HasPrefix(d.Data[RegoKey], "# The kata agent's policy") || !strings.Contains(d.Data[RegoKey], "package agent_policy") {
		t.Errorf("%s:\n%.300s", RegoKey, d.Data[RegoKey])
	}
	for name, rego := range map[string]string{
		"a permissive one": "package agent_policy\ndefault ExecProcessRequest := true\n",
		"none":             "",
	} {
		d.Data[RegoKey] = rego
		if rego == "" {
			delete(d.Data, RegoKey)
		}
		var b strings.Builder
		if err := toml.NewEncoder(&b).Encode(d); err != nil {
			t.Fatal(err)
		}
		if _, err := ParseInitdata([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "run cloister generate again") {
			t.Errorf("%s: error %v", name, err)
		}
	}
}

// The agent's policy follows the pod: what the pod runs is in it.
func TestRegoFollowsThePod(t *testing.T) {
	base, _ := of(pod())
	probed, err := of(pod(func(s *corev1.PodSpec) {
		s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ok"}}}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if string(base.Rego()) == string(probed.Rego()) || !strings.Contains(string(probed.Rego()), `"/tmp/ok"`) {
		t.Error("an exec probe is not in the agent's policy")
	}
	if got := probed.Containers[0].Exec; len(got) != 1 || got[0][1] != "/tmp/ok" {
		t.Errorf("exec %q", got)
	}
}

func TestExpandable(t *testing.T) {
	for in, want := range map[string]string{
		"plain":             "plain",
		"a.b":               `a\.b`,
		"--node=$(NODE_IP)": "--node=.*",
		"$$(NOT)":           `\$\(NOT\)`,
		"$(UNCLOSED":        `\$\(UNCLOSED`,
		"cost: $5":          `cost: \$5`,
	} {
		if got := expandable(in); got != want {
			t.Errorf("expandable(%q) = %q, want %q", in, got, want)
		}
	}
}

// The agent policy's tests evaluate it with OPA, in a module of their
// own: no binary may link OPA.
func TestNoBinaryLinksOPA(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../../cmd/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/open-policy-agent/opa") {
			t.Errorf("a binary links %s", dep)
		}
	}
}

func TestExplainSaysWhatTheGuestAllows(t *testing.T) {
	p, err := of(pod(func(s *corev1.PodSpec) {
		s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ok"}}}}
		s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}})
		s.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	got := p.Explain()
	for _, want := range []string{
		"container web, image " + img, "runs the image's entrypoint (not known) followed by --port 8080",
		"env MODE=prod", "env IP: any value (the host supplies it)", "capabilities: none", "exec: cat /tmp/ok",
		"not enforced: the containers' start order",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the explanation lacks %q:\n%s", want, got)
		}
	}
	p.Containers[0].ImageConfig = &ImageConfig{Entrypoint: []string{"/web"}, User: "1000"}
	if got := p.Explain(); !strings.Contains(got, "runs /web --port 8080") || !strings.Contains(got, "as user 1000") {
		t.Errorf("with the image's configuration:\n%s", got)
	}
}

// The annotation adds execs, each exactly as written, to the named
// container; a container not in the pod is refused.
func TestAllowExecAnnotation(t *testing.T) {
	p, err := Of(pod(), map[string]string{AllowExecAnnotation: `{"web": [["cat", "/tmp/state"], ["cat", "/tmp/state"]]}`})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Containers[0].Exec; len(got) != 1 || got[0][1] != "/tmp/state" || !strings.Contains(string(p.Rego()), `"/tmp/state"`) {
		t.Errorf("exec %q", got)
	}
	plain, _ := of(pod())
	if _, d := plain.Initdata(); func() string { _, d2 := p.Initdata(); return d2 }() == d {
		t.Error("an allowed exec kept the digest")
	}
	for value, want := range map[string]string{
		`{"spy": [["sh"]]}`: `no container "spy"`,
		`{"web": [[]]}`:     "an empty command",
		`{"web": "sh"}`:     "want {",
	} {
		if _, err := Of(pod(), map[string]string{AllowExecAnnotation: value}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", value, err, want)
		}
	}
}

// The initdata's strings read back, through a TOML decoder, as written.
func TestTOMLStrings(t *testing.T) {
	for _, s := range []string{"", `plain`, "quote \" and \\ backslash", "line\nbreak\ttab\r\x00\x1f\x7f", "ünïcödé ✓", "\xff\xfe"} {
		var got struct{ S string }
		if _, err := toml.Decode("s = "+tomlString(s), &got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if want := strings.ToValidUTF8(s, "\uFFFD"); got.S != want {
			t.Errorf("%q read back as %q", want, got.S)
		}
	}
}
