// Package agentpolicy evaluates the kata agent policies cloister generate
// writes, with OPA standing in for the agent's engine (regorus), on
// requests shaped as kata's genpolicy test cases shape them.
package agentpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// agent holds one pod's policy and its state (data.pstate), as the kata
// agent does: a request is allowed by its rule's value, a boolean or an
// object whose ops (JSON patch) change the state.
type agent struct {
	t      *testing.T
	module string
	state  map[string]any
}

func newAgent(t *testing.T, module []byte) *agent {
	return &agent{t: t, module: string(module), state: map[string]any{}}
}

// ask evaluates data.agent_policy.<kind> for req and applies the state
// changes of an allowed request.
func (a *agent) ask(kind string, req any) bool {
	a.t.Helper()
	raw, err := json.Marshal(req)
	if err != nil {
		a.t.Fatal(err)
	}
	var input any
	if err := json.Unmarshal(raw, &input); err != nil {
		a.t.Fatal(err)
	}
	store := inmem.NewFromObject(map[string]any{"pstate": a.state})
	rs, err := rego.New(rego.Query("data.agent_policy."+kind), rego.Module("policy.rego", a.module),
		rego.Store(store), rego.Input(input), rego.StrictBuiltinErrors(false)).Eval(context.Background())
	if err != nil {
		a.t.Fatalf("%s: %v", kind, err)
	}
	if len(rs) != 1 || len(rs[0].Expressions) != 1 {
		return false // undefined: the agent refuses
	}
	switch v := rs[0].Expressions[0].Value.(type) {
	case bool:
		return v
	case map[string]any:
		allowed, _ := v["allowed"].(bool)
		if allowed {
			ops, _ := v["ops"].([]any)
			for _, op := range ops {
				a.apply(op.(map[string]any))
			}
		}
		return allowed
	default:
		a.t.Fatalf("%s: a value of type %T", kind, v)
		return false
	}
}

// apply is JSON patch's add, the only op the policy makes.
func (a *agent) apply(op map[string]any) {
	a.t.Helper()
	if op["op"] != "add" {
		a.t.Fatalf("op %v", op)
	}
	parts := strings.Split(strings.TrimPrefix(op["path"].(string), "/"), "/")
	if parts[0] != "pstate" {
		a.t.Fatalf("a patch outside the policy state: %v", op["path"])
	}
	node := a.state
	for _, p := range parts[1 : len(parts)-1] {
		next, ok := node[p].(map[string]any)
		if !ok {
			a.t.Fatalf("patch %v: no %s", op["path"], p)
		}
		node = next
	}
	node[parts[len(parts)-1]] = op["value"]
}

func (a *agent) mustAllow(kind string, req any) {
	a.t.Helper()
	if !a.ask(kind, req) {
		a.t.Fatalf("%s denied:\n%s", kind, show(req))
	}
}

func show(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return fmt.Sprint(string(b))
}
