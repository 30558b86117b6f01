package wire

import (
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

// CASIdentityOf is the identity that claims of a CAS in a confidential VM
// show: what its peers must show to be the same CAS.
func CASIdentityOf(c *attest.Claims) (attest.Identity, error) {
	switch {
	case c.SNP != nil:
		id := attest.Identity{Type: attest.SNP, Measurement: c.SNP.Measurement, HostData: c.SNP.HostData}
		return id, CheckCASIdentity(id)
	case c.TDX != nil:
		id := attest.Identity{Type: attest.TDX, MRTD: c.TDX.MRTD, MRCONFIGID: c.TDX.MRCONFIGID, RTMR: make([]attest.Bytes, attest.PodRTMRs)}
		copy(id.RTMR, c.TDX.RTMR[:attest.PodRTMRs])
		return id, CheckCASIdentity(id)
	case c.SGX != nil:
		// An enclave is CAS by its MRENCLAVE (the code) and MRSIGNER:
		// no runtime class shares it.
		return attest.Identity{Type: attest.SGX, MRENCLAVE: c.SGX.MRENCLAVE, MRSIGNER: c.SGX.MRSIGNER}, nil
	}
	return attest.Identity{}, fmt.Errorf("%s evidence names no confidential VM's or enclave's measurement", c.Type)
}

// ErrSharedIdentity: an identity of CAS that another pod of its runtime
// class meets too.
var ErrSharedIdentity = attest.ErrSharedByRuntimeClass

// CheckCASIdentity refuses an identity of CAS in a confidential VM that
// pins only what its runtime class gives every pod (attest's
// CheckPinsPod): SEV-SNP without host data, TDX without MRCONFIGID or
// RTMR0-2. Other types (simulated CAS) pass: they are judged by their own
// rules.
func CheckCASIdentity(id attest.Identity) error {
	if err := id.CheckPinsPod(); err != nil {
		return fmt.Errorf("%w; pin the host data of CAS's pod policy (kubectl get cas NAME -o jsonpath='{.status.hostData}')", err)
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

// ParseCASPolicy reads an expectation of CAS's evidence (an attestation
// policy, YAML or JSON) strictly, and checks that each identity pins
// what CAS was launched as.
func ParseCASPolicy(data []byte) (*attest.Policy, error) {
	p, err := attest.ParsePolicy(data)
	if err != nil {
		return nil, err
	}
	return p, CheckCASPolicy(p)
}
