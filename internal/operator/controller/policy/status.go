package policy

import (
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/attest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Registration is where CAS holds a policy version.
type Registration struct {
	Name        string
	Revision    int
	Hash        string
	Predecessor string
	// CASRootCA names (SHA-256 of its DER, hex) the root CA of the CAS
	// that holds it.
	CASRootCA string
}

// Errors of a pass that are not CAS's answer.
var (
	// errNoCAS: casAddress names no CAS resource (yet).
	errNoCAS = errors.New("no CAS resource")
	// errCASNotReady: CAS is not initialised or in recovery.
	errCASNotReady = errors.New("CAS is not ready")
)

// addressError: casAddress cannot name a CAS resource; only a new
// resource can fix it.
type addressError struct{ err error }

func (e addressError) Error() string { return e.err.Error() }

// namespaceError: the policy is named outside the resource's namespace;
// only a policy signed under another name can fix it.
type namespaceError struct{ err error }

func (e namespaceError) Error() string { return e.err.Error() }

// judge is the Registered condition of a pass that registered reg or
// failed with err.
func judge(reg *Registration, err error) health.Observation {
	var addr addressError
	var ns namespaceError
	var api *casclient.APIError
	switch {
	case err == nil:
		msg := fmt.Sprintf("CAS holds policy %s at revision %d", reg.Name, reg.Revision)
		if reg.Predecessor != "" {
			msg += ", replacing " + reg.Predecessor
		}
		return health.Obs(health.True, health.ReasonPolicyRegistered, msg)
	case errors.As(err, &addr):
		return health.Obs(health.False, health.ReasonCASAddress, err.Error())
	case errors.As(err, &ns):
		return health.Obs(health.False, health.ReasonPolicyNamespace, err.Error())
	case errors.Is(err, errNoCAS):
		return health.Obs(health.Unknown, health.ReasonCASAddress, err.Error())
	case errors.Is(err, errCASNotReady):
		return health.Obs(health.Unknown, health.ReasonCASNotReady, err.Error())
	case errors.Is(err, casclient.ErrNoEvidence) || attest.CheckOf(err) != "":
		return health.Obs(health.False, health.ReasonCASNotAttested, err.Error())
	case errors.As(err, &api) && api.Status == http.StatusServiceUnavailable:
		return health.Obs(health.Unknown, health.ReasonCASNotReady, api.Message)
	case errors.As(err, &api) && api.Status == http.StatusConflict && api.Reason == wire.ReasonSuperseded:
		return health.Obs(health.True, health.ReasonPolicySuperseded, api.Message+"; this resource is history now: delete it when you no longer need it")
	case errors.As(err, &api) && api.Status >= 400 && api.Status < 500:
		return health.Obs(health.False, health.ReasonPolicyRefused, fmt.Sprintf("CAS refused the policy (%s): %s", api.Reason, api.Message))
	}
	return health.Obs(health.Unknown, health.ReasonCASUnreachable, err.Error())
}

// setStatus writes the pass's outcome into st.
func setStatus(st *casv1beta1.PolicyStatus, generation int64, reg *Registration, obs health.Observation) {
	st.ObservedGeneration = generation
	if reg != nil {
		st.PolicyName, st.Revision, st.Hash, st.Predecessor, st.CASRootCA = reg.Name, reg.Revision, reg.Hash, reg.Predecessor, reg.CASRootCA
	}
	switch obs.Status {
	case health.True:
		st.State = common.StateHealthy
	case health.False:
		st.State = common.StateUnhealthy
	default:
		st.State = common.StatePending
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: string(health.Registered), Status: obs.Status,
		Reason: string(obs.Reason), Message: obs.Message, ObservedGeneration: generation})
}
