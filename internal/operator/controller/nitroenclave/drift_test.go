package nitroenclave

import (
	"context"
	"testing"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Both backends' releases render as the API server stores them: no owned
// object reads as drifted (which would upgrade the release on every pass).
func TestNoDrift(t *testing.T) {
	e := newEnv(t, "ned-drift")
	for _, sim := range []bool{false, true} {
		n := sample(e.ns, map[bool]string{true: "sim", false: "nitro"}[sim])
		n.Spec.Simulation = sim
		n.Spec.Enclave.MemoryMiB = 256
		if err := e.c.Create(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		e.reconcile(n, 5)
		for _, c := range n.Status.Conditions {
			if c.Type != string(health.IsHealthy) && !health.IsDesired(c) {
				t.Errorf("simulation=%v: %s=%s %s: %s", sim, c.Type, c.Status, c.Reason, c.Message)
			}
		}
		if e.ev.Count("Scheduled", "Deployment ned-drift/ned-"+n.Name) == 0 {
			t.Errorf("simulation=%v: events %v", sim, e.ev.All())
		}
	}
}
