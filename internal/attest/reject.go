package attest

import (
	"errors"
	"fmt"
)

// Check names what a rejection failed; the CLI prints
// "rejected: <check>: <reason>".
type Check string

// The checks, from reading evidence to the policy over its claims.
const (
	CheckType       Check = "type"
	CheckFormat     Check = "format"      // truncated, trailing bytes, bad fields
	CheckSignature  Check = "signature"   // evidence signature
	CheckChain      Check = "chain"       // certificate chain to the pinned root
	CheckValidity   Check = "validity"    // a certificate or collateral at the given time
	CheckCollateral Check = "collateral"  // TCB info / QE identity signature and shape
	CheckBinding    Check = "binding"     // QE report binds the attestation key
	CheckRevoked    Check = "revoked"     // a certificate of the chain is on its issuer's CRL
	CheckTCB        Check = "tcb-status"  // policy: accepted TCB statuses
	CheckIdentity   Check = "identity"    // policy: expected identities, minimum SVNs
	CheckDebug      Check = "debug"       // policy: debug evidence
	CheckReportData Check = "report-data" // policy: binding of the report data
	CheckNonce      Check = "nonce"       // policy: the verifier's nonce (freshness)
	CheckSimulation Check = "simulation"  // policy: simulated evidence
)

// Rejection is a failed check with its reason.
type Rejection struct {
	Check  Check
	Reason string
	Err    error // the underlying error, if any
}

func (r *Rejection) Error() string { return string(r.Check) + ": " + r.Reason }
func (r *Rejection) Unwrap() error { return r.Err }

// Reject builds a Rejection of check.
func Reject(check Check, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Rejection{Check: check, Reason: err.Error(), Err: errors.Unwrap(err)}
}

// CheckOf returns the check err failed, or "" when err is no rejection.
func CheckOf(err error) Check {
	var r *Rejection
	if errors.As(err, &r) {
		return r.Check
	}
	return ""
}
