package policy

import (
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/internal/attest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

func TestJudge(t *testing.T) {
	for _, tt := range []struct {
		name   string
		reg    *Registration
		err    error
		status metav1.ConditionStatus
		reason health.Reason
	}{
		{"registered", &Registration{Name: "p", Revision: 1}, nil, health.True, health.ReasonPolicyRegistered},
		{"bad address", nil, addressError{errors.New("casAddress")}, health.False, health.ReasonCASAddress},
		{"no CAS yet", nil, fmt.Errorf("%w ns/cas", errNoCAS), health.Unknown, health.ReasonCASAddress},
		{"CAS not ready", nil, fmt.Errorf("%w: uninitialized", errCASNotReady), health.Unknown, health.ReasonCASNotReady},
		{"pod not running", nil, conn.ErrNotRunning, health.Unknown, health.ReasonCASUnreachable},
		{"no evidence", nil, casclient.ErrNoEvidence, health.False, health.ReasonCASNotAttested},
		{"evidence rejected", nil, attest.Reject(attest.CheckSimulation, "x"), health.False, health.ReasonCASNotAttested},
		{"owners' threshold", nil, &casclient.APIError{Status: 403, Reason: "unauthorized"}, health.False, health.ReasonPolicyRefused},
		{"invalid", nil, &casclient.APIError{Status: 400, Reason: "invalid"}, health.False, health.ReasonPolicyRefused},
		{"another version's place", nil, &casclient.APIError{Status: 409, Reason: wire.ReasonConflict}, health.False, health.ReasonPolicyRefused},
		{"superseded", nil, &casclient.APIError{Status: 409, Reason: wire.ReasonSuperseded}, health.True, health.ReasonPolicySuperseded},
		{"recovery", nil, &casclient.APIError{Status: 503, Reason: "recovery"}, health.Unknown, health.ReasonCASNotReady},
		{"CAS broke", nil, &casclient.APIError{Status: 500}, health.Unknown, health.ReasonCASUnreachable},
		{"network", nil, errors.New("connection refused"), health.Unknown, health.ReasonCASUnreachable},
	} {
		if got := judge(tt.reg, tt.err); got.Status != tt.status || got.Reason != tt.reason {
			t.Errorf("%s: %s/%s, want %s/%s", tt.name, got.Status, got.Reason, tt.status, tt.reason)
		}
	}
}
