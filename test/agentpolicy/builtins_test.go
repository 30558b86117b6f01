package agentpolicy

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

// regorusBuiltins are the builtins the kata agent's engine has: those of
// regorus 0.9.1's docs/builtins.md that need no cargo feature, and those
// of its regex feature, which the agent builds with. OPA has more; a
// policy that called one of them would fail in the guest.
var regorusBuiltins = strings.Fields(`
	equal gt gte lt lte neq
	abs ceil div floor minus mul numbers.range plus rem round
	count max min product sort sum
	array.concat array.reverse array.slice
	and intersection or union
	json.filter json.remove object.filter object.get object.keys object.remove object.subset object.union object.union_n
	concat contains endswith format_int indexof indexof_n lower replace split sprintf startswith
	strings.any_prefix_match strings.any_suffix_match strings.replace_n strings.reverse substring
	trim trim_left trim_prefix trim_right trim_space trim_suffix upper
	regex.find_all_string_submatch_n regex.find_n regex.is_valid regex.match regex.replace regex.split regex.template_match
	bits.and bits.lsh bits.negate bits.or bits.rsh bits.xor
	to_number units.parse units.parse_bytes
	is_array is_boolean is_null is_number is_object is_set is_string type_name
	json.is_valid json.marshal json.unmarshal
	print trace
`)

// language is what OPA's compiler writes the language's own constructs
// as: assignment, unification, membership (in, some ... in) and print.
var language = []string{"assign", "eq", "internal.member_2", "internal.member_3", "internal.print"}

// calledBuiltins are the builtins a module's compiled rules call.
func calledBuiltins(t testing.TB, module string) []string {
	t.Helper()
	c, err := ast.CompileModulesWithOpt(map[string]string{"policy.rego": module}, ast.CompileOpts{})
	if err != nil {
		t.Fatalf("compiling the policy: %v", err)
	}
	called := map[string]bool{}
	for _, m := range c.Modules {
		ast.WalkExprs(m, func(e *ast.Expr) bool {
			if e.IsCall() {
				called[e.Operator().String()] = true
			}
			return false
		})
		ast.WalkTerms(m, func(term *ast.Term) bool {
			if call, ok := term.Value.(ast.Call); ok {
				called[call[0].String()] = true
			}
			return false
		})
	}
	var out []string
	for name := range called {
		if !strings.HasPrefix(name, "data.") { // the module's own functions
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestTheRulesCallOnlyTheAgentsBuiltins(t *testing.T) {
	allowed := append(slices.Clone(regorusBuiltins), language...)
	called := calledBuiltins(t, string(thePod(t).Rego()))
	if len(called) < 5 {
		t.Fatalf("found only %v: the walk is broken", called)
	}
	for _, name := range called {
		if !slices.Contains(allowed, name) {
			t.Errorf("the policy calls %s, which %s does not have", name, podpolicy.RegorusVersion)
		}
	}
	t.Logf("builtins called: %v", called)
	// The check itself: a builtin regorus lacks is found.
	if got := calledBuiltins(t, "package agent_policy\nx := http.send({})\n"); !slices.Contains(got, "http.send") {
		t.Errorf("http.send not found: %v", got)
	}
}

// The same policy gives the same bytes, however often it is made or
// decoded again.
func TestTheRegoIsDeterministic(t *testing.T) {
	first := thePod(t).Rego()
	for range 20 {
		if again := thePod(t).Rego(); string(again) != string(first) {
			t.Fatal("two runs gave different Rego")
		}
	}
	var p podpolicy.Policy
	if err := json.Unmarshal(thePod(t).Canonical(), &p); err != nil {
		t.Fatal(err)
	}
	if string(p.Rego()) != string(first) {
		t.Error("the policy read back from its JSON gives other Rego")
	}
	if !strings.Contains(string(first), podpolicy.KataSource) || !strings.Contains(string(first), podpolicy.RegorusVersion) {
		t.Error("the header does not name the kata source and the engine")
	}
}
