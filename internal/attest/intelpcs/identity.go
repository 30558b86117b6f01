package intelpcs

import (
	"bytes"
	"encoding/hex"
	"fmt"

	"github.com/cloister-cc/cloister/internal/attest"
)

// matchQE checks the quoting enclave is the one Intel's QE identity
// describes.
func matchQE(qe *qeIdentity, report Report) error {
	signer, err := hex.DecodeString(qe.MRSIGNER)
	switch {
	case err != nil || !bytes.Equal(signer, report.MRSIGNER()):
		return attest.Reject(attest.CheckCollateral, "the quoting enclave's MRSIGNER is not the QE identity's")
	case report.ISVProdID() != qe.ISVProdID:
		return attest.Reject(attest.CheckCollateral, "the quoting enclave's ISVPRODID is not the QE identity's")
	case !masked(report.MiscSelect(), qe.MiscSelect, qe.MiscSelectMask):
		return attest.Reject(attest.CheckCollateral, "the quoting enclave's MISCSELECT does not match the QE identity")
	case !masked(report.Attributes(), qe.Attributes, qe.AttributesMask):
		return attest.Reject(attest.CheckCollateral, "the quoting enclave's ATTRIBUTES do not match the QE identity")
	}
	return nil
}

// moduleStatus checks the TDX module is Intel's and returns the TCB
// status of its version tee: with TCB info v3 and a module major version, by the identity
// TDX_<version> and its levels over the module's SVN; otherwise only the
// signer and attributes of TCB info's tdxModule are checked.
func moduleStatus(m *TDXModule, tee []byte, info *tcbInfo) (string, error) {
	if info.Version >= 3 && tee[1] > 0 {
		id := fmt.Sprintf("TDX_%02X", tee[1])
		for i := range info.TDXModuleIdentities {
			ident := &info.TDXModuleIdentities[i]
			if ident.ID != id {
				continue
			}
			if err := matchModule(m, ident); err != nil {
				return "", err
			}
			status := levelStatus(ident.TCBLevels, func(l *tcbLevel) bool { return uint16(tee[0]) >= l.TCB.ISVSVN })
			if status == "" {
				return "", attest.Reject(attest.CheckTCB, "the TDX module's SVN %d is below every TCB level of %s", tee[0], id)
			}
			return status, nil
		}
		return "", attest.Reject(attest.CheckCollateral, "the TCB info has no identity %s for the TDX module's major version %d", id, tee[1])
	}
	if info.TDXModule == nil {
		return "", attest.Reject(attest.CheckCollateral, "the TCB info has no tdxModule: is it TDX TCB info?")
	}
	return attest.TCBUpToDate, matchModule(m, info.TDXModule)
}

func matchModule(m *TDXModule, ident *moduleIdentity) error {
	signer, err := hex.DecodeString(ident.MRSIGNER)
	name := ident.ID
	if name == "" {
		name = "tdxModule"
	}
	switch {
	case err != nil || !bytes.Equal(signer, m.MRSIGNERSEAM):
		return attest.Reject(attest.CheckCollateral, "the TDX module's MRSIGNERSEAM is not the TCB info's %s signer", name)
	case !masked(m.SEAMAttributes, ident.Attributes, ident.AttributesMask):
		return attest.Reject(attest.CheckCollateral, "the TDX module's SEAM attributes do not match the TCB info's %s", name)
	}
	return nil
}

// masked says whether value and want agree on the bits of mask (hex).
func masked(value []byte, want, mask string) bool {
	w, err1 := hex.DecodeString(want)
	m, err2 := hex.DecodeString(mask)
	if err1 != nil || err2 != nil || len(w) != len(value) || len(m) != len(value) {
		return false
	}
	for i := range value {
		if value[i]&m[i] != w[i]&m[i] {
			return false
		}
	}
	return true
}
