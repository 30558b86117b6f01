package wire

import (
	"errors"
	"fmt"

	"github.com/cloister-cc/cloister/internal/attest"
)

// A CAS in a confidential VM is CAS only by the launch measurement and the
// host data together: the measurement covers the VM's firmware, kernel,
// initrd and command line, which every pod of CAS's runtime class shares;
// the host data (SEV-SNP HOST_DATA, TDX MRCONFIGID) is the digest of CAS's
// own pod policy (its initdata and the kata agent policy generated from
// it), which no other pod has. On TDX the RTMRs 0 to 2 (firmware, kernel
// and initrd, command line) are pinned too.

// tdxRTMRs is how many RTMRs a TDX identity of CAS pins: the boot chain;
// RTMR3 is extended at run time.
const tdxRTMRs = 3

// CASIdentityOf is the identity that claims of a CAS in a confidential VM
// show: what its peers must show to be the same CAS.
func CASIdentityOf(c *attest.Claims) (attest.Identity, error) {
	switch {
	case c.SNP != nil:
		id := attest.Identity{Type: attest.SNP, Measurement: c.SNP.Measurement, HostData: c.SNP.HostData}
		return id, CheckCASIdentity(id)
	case c.TDX != nil:
		id := attest.Identity{Type: attest.TDX, MRTD: c.TDX.MRTD, MRCONFIGID: c.TDX.MRCONFIGID, RTMR: make([]attest.Bytes, tdxRTMRs)}
		copy(id.RTMR, c.TDX.RTMR[:tdxRTMRs])
		return id, CheckCASIdentity(id)
	}
	return attest.Identity{}, fmt.Errorf("%s evidence names no confidential VM's measurement", c.Type)
}

// ErrSharedIdentity: an identity of CAS that another pod of its runtime
// class meets too.
var ErrSharedIdentity = errors.New("every pod of CAS's runtime class meets it")

// zero says whether b is empty or all zero bytes (no host data).
func zero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// CheckCASIdentity refuses an identity of CAS in a confidential VM that
// pins only what its runtime class gives every pod: SEV-SNP without host
// data, TDX without MRCONFIGID or RTMR0-2. Other types (simulated CAS)
// pass: they are judged by their own rules.
func CheckCASIdentity(id attest.Identity) error {
	switch id.Type {
	case attest.SNP:
		if zero(id.HostData) {
			return fmt.Errorf("an SEV-SNP identity of CAS without hostData: %w; pin the host data of CAS's pod policy (kubectl get cas NAME -o jsonpath='{.status.hostData}')", ErrSharedIdentity)
		}
	case attest.TDX:
		if zero(id.MRCONFIGID) {
			return fmt.Errorf("a TDX identity of CAS without mrConfigID: %w; pin the host data of CAS's pod policy (kubectl get cas NAME -o jsonpath='{.status.hostData}')", ErrSharedIdentity)
		}
		if len(id.RTMR) < tdxRTMRs {
			return fmt.Errorf("a TDX identity of CAS with %d RTMRs: pin RTMR0 to RTMR2 (firmware, kernel and initrd, command line), or a TD of another boot chain with the same MRTD meets it", len(id.RTMR))
		}
		for i := range tdxRTMRs {
			if len(id.RTMR[i]) == 0 {
				return fmt.Errorf("a TDX identity of CAS with RTMR%d empty: pin RTMR0 to RTMR2, or a TD of another boot chain with the same MRTD meets it", i)
			}
		}
	}
	return nil
}

// CheckCASPolicy is CheckCASIdentity for each identity of an expectation
// of CAS.
func CheckCASPolicy(p *attest.Policy) error {
	for i, id := range p.Identities {
		if err := CheckCASIdentity(id); err != nil {
			return fmt.Errorf("identities[%d]: %w", i, err)
		}
	}
	return nil
}
