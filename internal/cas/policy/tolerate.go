package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cloister-cc/cloister/internal/attest"
)

// Tolerations name the exceptions a service's attestation may accept,
// as SCONE's `tolerate` list does: explicit, named, instead of a list of
// Intel's status strings. A status that needs two of them (such as
// ConfigurationAndSWHardeningNeeded) is accepted only with both; Revoked
// never is.
const (
	TolerateDebugMode               = "debug-mode"
	TolerateOutdatedTCB             = "outdated-tcb"
	TolerateSoftwareHardeningNeeded = "software-hardening-needed"
	TolerateConfigurationNeeded     = "configuration-needed"
)

var tolerations = []string{TolerateDebugMode, TolerateOutdatedTCB, TolerateSoftwareHardeningNeeded, TolerateConfigurationNeeded}

// statusNeeds is what each TCB status other than UpToDate needs tolerated.
var statusNeeds = map[string][]string{
	attest.TCBSWHardeningNeeded:                 {TolerateSoftwareHardeningNeeded},
	attest.TCBConfigurationNeeded:               {TolerateConfigurationNeeded},
	attest.TCBConfigurationAndSWHardeningNeeded: {TolerateConfigurationNeeded, TolerateSoftwareHardeningNeeded},
	attest.TCBOutOfDate:                         {TolerateOutdatedTCB},
	attest.TCBOutOfDateConfigurationNeeded:      {TolerateOutdatedTCB, TolerateConfigurationNeeded},
}

func validateTolerate(list []string) error {
	for i, t := range list {
		if !slices.Contains(tolerations, t) {
			return fmt.Errorf("attestation.tolerate[%d]: %q: use %s", i, t, strings.Join(tolerations, ", "))
		}
	}
	return nil
}

// acceptedStatuses is the service's acceptTCB widened by its tolerations;
// nil (UpToDate only) when neither says more.
func (a *Attestation) acceptedStatuses() []string {
	out := slices.Clone(a.AcceptTCB)
	for _, status := range attest.TCBStatuses {
		needs, ok := statusNeeds[status]
		if !ok || slices.Contains(out, status) {
			continue
		}
		all := true
		for _, n := range needs {
			all = all && slices.Contains(a.Tolerate, n)
		}
		if all {
			out = append(out, status)
		}
	}
	if len(out) > 0 && !slices.Contains(out, attest.TCBUpToDate) && len(a.AcceptTCB) == 0 {
		out = append([]string{attest.TCBUpToDate}, out...)
	}
	return out
}
