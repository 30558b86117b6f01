package refvalues

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sigstruct"
)

// SGX are an enclave's, from its SIGSTRUCT: what EINIT makes it report.
type SGX struct {
	MRENCLAVE attest.Bytes `json:"mrenclave"`
	MRSIGNER  attest.Bytes `json:"mrsigner"`
	ISVProdID uint16       `json:"isvProdID"`
	// ISVSVN is the signed security version; an identity takes it as the
	// lowest accepted (minISVSVN), so older enclaves of the signer fail.
	ISVSVN uint16 `json:"isvSVN"`
	// Attributes must match where AttributesMask is set.
	Attributes     attest.Bytes `json:"attributes"`
	AttributesMask attest.Bytes `json:"attributesMask"`
}

// ComputeSGX verifies a SIGSTRUCT and returns the enclave's reference
// values. A debug enclave is refused: its memory is the host's to read.
// The mask gains the DEBUG bit where the signer left it out, so the
// identity holds a release enclave to release mode even where EINIT
// would launch it in debug.
func ComputeSGX(raw []byte) (*File, error) {
	e, err := sigstruct.Parse(raw)
	if err != nil {
		return nil, err
	}
	if e.Debug() {
		return nil, errors.New("sigstruct: the enclave is signed for debug mode (ATTRIBUTES.DEBUG), whose memory the host can read: sign a release build")
	}
	mask := bytes.Clone(e.AttributesMask)
	mask[0] |= sigstruct.AttributeDebug
	return &File{
		SGX: &SGX{
			MRENCLAVE: e.MRENCLAVE, MRSIGNER: e.MRSIGNER, ISVProdID: e.ISVProdID, ISVSVN: e.ISVSVN,
			Attributes: e.Attributes, AttributesMask: mask,
		},
		Source: &Source{Sigstruct: Digest(raw)},
	}, nil
}

// Identity is the policy identity the values pin.
func (s *SGX) Identity() attest.Identity {
	prod := s.ISVProdID
	return attest.Identity{
		Type: attest.SGX, MRENCLAVE: s.MRENCLAVE, MRSIGNER: s.MRSIGNER, ISVProdID: &prod, MinISVSVN: s.ISVSVN,
		Attributes: s.Attributes, AttributesMask: s.AttributesMask,
	}
}

func (s *SGX) validate() error {
	for _, f := range []struct {
		name string
		b    attest.Bytes
		size int
	}{{"mrenclave", s.MRENCLAVE, 32}, {"mrsigner", s.MRSIGNER, 32}, {"attributes", s.Attributes, 16}, {"attributesMask", s.AttributesMask, 16}} {
		if len(f.b) != f.size {
			return fmt.Errorf("sgx.%s: %d bytes, want %d (%d hex digits): cloister reference-values compute --platform sgx writes it from the enclave's SIGSTRUCT", f.name, len(f.b), f.size, 2*f.size)
		}
	}
	if s.Attributes[0]&s.AttributesMask[0]&sigstruct.AttributeDebug != 0 {
		return errors.New("sgx.attributes: DEBUG is set: a debug enclave's memory is the host's to read")
	}
	return nil
}
