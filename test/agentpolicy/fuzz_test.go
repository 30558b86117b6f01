package agentpolicy

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

// FuzzRego makes agent policies from arbitrary pod policies (what a pod
// spec can say, as JSON): the Rego always compiles, calls only the
// engine's builtins, and every pattern in its data is a valid regular
// expression (RE2 here; regorus's Rust syntax shares it).
func FuzzRego(f *testing.F) {
	f.Add(thePod(f).Canonical())
	f.Add([]byte(`{"version":"cloister.dev/pod-policy/v1","containers":[{"name":"a\"b","image":"x@sha256:00","args":["$(A","$$(B)","\\","${C}"],"env":[{"name":"Q\n","value":"$(R)\u0000"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p podpolicy.Policy
		if json.Unmarshal(data, &p) != nil {
			return
		}
		module := string(p.Rego())
		if _, err := ast.CompileModulesWithOpt(map[string]string{"policy.rego": module}, ast.CompileOpts{}); err != nil {
			t.Fatalf("the Rego does not compile: %v", err)
		}
		var parsed struct {
			Containers []struct {
				Args        []string `json:"args"`
				Env         []string `json:"env"`
				EnvRequired []string `json:"env_required"`
			} `json:"containers"`
		}
		if err := json.Unmarshal(policyData(t, module), &parsed); err != nil {
			t.Fatalf("policy_data: %v", err)
		}
		for _, c := range parsed.Containers {
			for _, re := range append(append(c.Args, c.Env...), c.EnvRequired...) {
				if _, err := regexp.Compile(re); err != nil {
					t.Fatalf("pattern %q: %v", re, err)
				}
			}
		}
	})
}

// policyData is the JSON after "policy_data := ".
func policyData(t *testing.T, module string) []byte {
	t.Helper()
	const marker = "\npolicy_data := "
	for i := len(module) - len(marker); i >= 0; i-- {
		if module[i:i+len(marker)] == marker {
			return []byte(module[i+len(marker):])
		}
	}
	t.Fatal("no policy_data")
	return nil
}
