// Package intelpcs owns what SGX and TDX quote verification share: the
// pinned Intel SGX Root CA, the layout of an SGX enclave report (the
// quoting enclave's report in both), the signatures and PCK chain after
// their bodies (Signed), and the evaluation of Intel PCS
// collateral (TCB info, QE identity, their signing chain) to a TCB status,
// following Intel's Quote Verification Library.
package intelpcs

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	_ "embed"
	"encoding/binary"
	"encoding/pem"
	"math/big"
	"sync"

	"github.com/cloister-cc/cloister/internal/attest"
)

//go:embed intel_sgx_root_ca.pem
var rootPEM []byte

// RootSHA256 pins the embedded Intel SGX Root CA.
const RootSHA256 = "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3"

// Root is the embedded Intel SGX Root CA, parsed once: callers must not
// change it.
var Root = sync.OnceValue(func() *x509.Certificate {
	block, _ := pem.Decode(rootPEM)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		panic("embedded Intel SGX Root CA: " + err.Error())
	}
	return c
})

// ReportLen is the size of an SGX enclave report body.
const ReportLen = 384

// Report is an SGX enclave report body (Intel SGX ECDSA Quote Library
// API, appendix A); callers make sure it is ReportLen bytes.
type Report []byte

const attributeDebug = 0x02

func (r Report) MiscSelect() []byte { return r[16:20] }
func (r Report) Attributes() []byte { return r[48:64] }
func (r Report) MRENCLAVE() []byte  { return r[64:96] }
func (r Report) MRSIGNER() []byte   { return r[128:160] }
func (r Report) ISVProdID() uint16  { return binary.LittleEndian.Uint16(r[256:]) }
func (r Report) ISVSVN() uint16     { return binary.LittleEndian.Uint16(r[258:]) }
func (r Report) ReportData() []byte { return r[320:384] }

// Debug says whether the enclave runs in debug mode.
func (r Report) Debug() bool { return binary.LittleEndian.Uint64(r[48:])&attributeDebug != 0 }

// VerifyRS checks a raw r||s ECDSA signature over SHA-256(msg), the form
// of every signature in quotes and PCS collateral.
func VerifyRS(key *ecdsa.PublicKey, msg, rs []byte) bool {
	if len(rs) != 64 {
		return false
	}
	d := sha256.Sum256(msg)
	return ecdsa.Verify(key, d[:], new(big.Int).SetBytes(rs[:32]), new(big.Int).SetBytes(rs[32:]))
}

// ParseChain reads PEM certificates, leaf first.
func ParseChain(what string, data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, attest.Reject(attest.CheckFormat, "%s: %v", what, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, attest.Reject(attest.CheckFormat, "%s: no certificate", what)
	}
	return certs, nil
}
