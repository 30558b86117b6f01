package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
)

func TestTolerate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a        Attestation
		accepted []string // nil: UpToDate only (attest's default)
		allowDbg bool
		refused  []string
	}{
		{"nothing tolerated", Attestation{}, nil, false, []string{attest.TCBSWHardeningNeeded}},
		{"software hardening", Attestation{Tolerate: []string{TolerateSoftwareHardeningNeeded}},
			[]string{attest.TCBUpToDate, attest.TCBSWHardeningNeeded}, false, []string{attest.TCBConfigurationAndSWHardeningNeeded, attest.TCBOutOfDate}},
		{"both halves of a combined status", Attestation{Tolerate: []string{TolerateSoftwareHardeningNeeded, TolerateConfigurationNeeded}},
			[]string{attest.TCBUpToDate, attest.TCBSWHardeningNeeded, attest.TCBConfigurationNeeded, attest.TCBConfigurationAndSWHardeningNeeded}, false, nil},
		{"outdated but not misconfigured", Attestation{Tolerate: []string{TolerateOutdatedTCB}},
			[]string{attest.TCBUpToDate, attest.TCBOutOfDate}, false, []string{attest.TCBOutOfDateConfigurationNeeded, attest.TCBRevoked}},
		{"debug mode", Attestation{Tolerate: []string{TolerateDebugMode}}, nil, true, nil},
		{"added to an explicit acceptTCB", Attestation{AcceptTCB: []string{attest.TCBUpToDate}, Tolerate: []string{TolerateOutdatedTCB}},
			[]string{attest.TCBUpToDate, attest.TCBOutOfDate}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Document{}
			p := d.Policy(&Service{Attestation: tc.a})
			if !slices.Equal(p.AcceptTCB, tc.accepted) || p.AllowDebug != tc.allowDbg {
				t.Errorf("acceptTCB %v allowDebug %v, want %v %v", p.AcceptTCB, p.AllowDebug, tc.accepted, tc.allowDbg)
			}
			for _, s := range tc.refused {
				if err := p.Check(&attest.Claims{TCBStatus: s}); attest.CheckOf(err) != attest.CheckTCB {
					t.Errorf("status %s: %v, want a tcb-status rejection", s, err)
				}
			}
		})
	}
	_, err := Parse([]byte(doc(t, []string{ownerPEM(t)}, replace("    identities:", "    tolerate: [outdated-tcb, hyperthreading]\n    identities:"))))
	if err == nil || !strings.Contains(err.Error(), `attestation.tolerate[1]: "hyperthreading": use debug-mode, outdated-tcb`) {
		t.Errorf("unknown toleration: %v", err)
	}
}
