// Package sigstruct reads an SGX enclave's SIGSTRUCT (Intel SDM vol. 3D,
// "Enclave Signature Structure"): the 1808 bytes a Gramine .sig file is,
// and an SGX SDK enclave's signed image carries. It checks what EINIT
// checks of it (the RSA-3072 signature with exponent 3 over its two signed
// regions, Q1 and Q2) and returns the identity the enclave will report:
// MRENCLAVE, MRSIGNER (the SHA-256 of the signer's modulus), ISVPRODID,
// ISVSVN, and the attributes the signer requires.
package sigstruct

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/big"
)

// Size is a SIGSTRUCT's.
const Size = 1808

// Field offsets (SDM vol. 3D, table "Layout of Enclave Signature
// Structure"). The signature covers [0, modulus) and [miscSelect,
// reserved4).
const (
	offHeader     = 0
	offVendor     = 16
	offDate       = 20
	offHeader2    = 24
	offSWDefined  = 40
	offModulus    = 128
	offExponent   = 512
	offSignature  = 516
	offMiscSelect = 900
	offMiscMask   = 904
	offAttributes = 928
	offAttrMask   = 944
	offEnclaveHsh = 960
	offReserved3  = 992
	offISVProdID  = 1024
	offISVSVN     = 1026
	offReserved4  = 1028
	offQ1         = 1040
	offQ2         = 1424

	keyLen = 384 // RSA-3072
)

var (
	header  = mustHex("06000000e10000000000010000000000")
	header2 = mustHex("01010000600000006000000001000000")
)

// AttributeDebug is the DEBUG bit of ATTRIBUTES' flags: an enclave
// launched with it lets the host read and write its memory.
const AttributeDebug = 0x02

// Enclave is what a verified SIGSTRUCT says the enclave is.
type Enclave struct {
	MRENCLAVE []byte // ENCLAVEHASH
	MRSIGNER  []byte // SHA-256 of the modulus, little-endian as stored
	ISVProdID uint16
	ISVSVN    uint16
	// Attributes and AttributesMask: the enclave's ATTRIBUTES (flags,
	// then XFRM) must equal Attributes where AttributesMask is set.
	Attributes     []byte
	AttributesMask []byte
	MiscSelect     uint32
	MiscMask       uint32
	// Vendor is 0x8086 for Intel's own enclaves, else 0.
	Vendor uint32
	// Date is the signing date the signer wrote, yyyymmdd.
	Date string
}

// Debug says whether the signer requires debug mode.
func (e *Enclave) Debug() bool { return e.Attributes[0]&AttributeDebug != 0 }

// DebugPinned says whether the mask makes EINIT hold the enclave to its
// DEBUG bit: when it does not, the same MRENCLAVE can be launched in
// debug mode.
func (e *Enclave) DebugPinned() bool { return e.AttributesMask[0]&AttributeDebug != 0 }

// Parse checks a SIGSTRUCT as EINIT would and returns the enclave it
// signs for. Errors name the field at fault.
func Parse(raw []byte) (*Enclave, error) {
	if len(raw) != Size {
		return nil, fmt.Errorf("sigstruct: %d bytes, a SIGSTRUCT has %d", len(raw), Size)
	}
	if !bytes.Equal(raw[offHeader:offVendor], header) {
		return nil, fmt.Errorf("sigstruct: HEADER is %x, want %x: not a SIGSTRUCT", raw[offHeader:offVendor], header)
	}
	if !bytes.Equal(raw[offHeader2:offSWDefined], header2) {
		return nil, fmt.Errorf("sigstruct: HEADER2 is %x, want %x", raw[offHeader2:offSWDefined], header2)
	}
	vendor := binary.LittleEndian.Uint32(raw[offVendor:])
	if vendor != 0 && vendor != 0x8086 {
		return nil, fmt.Errorf("sigstruct: VENDOR is %#x, want 0 or 0x8086", vendor)
	}
	if e := binary.LittleEndian.Uint32(raw[offExponent:]); e != 3 {
		return nil, fmt.Errorf("sigstruct: EXPONENT is %d, SGX requires 3", e)
	}
	n := le(raw[offModulus:offExponent])
	if n.BitLen() != keyLen*8 {
		return nil, fmt.Errorf("sigstruct: MODULUS has %d bits, SGX requires 3072", n.BitLen())
	}
	sig := le(raw[offSignature:offMiscSelect])
	if sig.Cmp(n) >= 0 {
		return nil, fmt.Errorf("sigstruct: SIGNATURE is not below the modulus")
	}
	key := &rsa.PublicKey{N: n, E: 3}
	digest := SignedHash(raw)
	if err := rsa.VerifyPKCS1v15(key, crypto.SHA256, digest, sig.FillBytes(make([]byte, keyLen))); err != nil {
		return nil, fmt.Errorf("sigstruct: SIGNATURE does not verify with MODULUS: the SIGSTRUCT was changed after signing or signed by another key")
	}
	// EINIT checks Q1 = floor(S²/M) and Q2 = floor((S³ - Q1·S·M)/M), the
	// quotients it uses to verify without division.
	q1, r := new(big.Int).QuoRem(new(big.Int).Mul(sig, sig), n, new(big.Int))
	q2 := new(big.Int).Quo(new(big.Int).Mul(r, sig), n)
	if le(raw[offQ1:offQ2]).Cmp(q1) != 0 || le(raw[offQ2:]).Cmp(q2) != 0 {
		return nil, fmt.Errorf("sigstruct: Q1 or Q2 does not follow from SIGNATURE and MODULUS: EINIT would refuse it")
	}
	mrsigner := sha256.Sum256(raw[offModulus:offExponent])
	return &Enclave{
		MRENCLAVE:      bytes.Clone(raw[offEnclaveHsh:offReserved3]),
		MRSIGNER:       mrsigner[:],
		ISVProdID:      binary.LittleEndian.Uint16(raw[offISVProdID:]),
		ISVSVN:         binary.LittleEndian.Uint16(raw[offISVSVN:]),
		Attributes:     bytes.Clone(raw[offAttributes:offAttrMask]),
		AttributesMask: bytes.Clone(raw[offAttrMask:offEnclaveHsh]),
		MiscSelect:     binary.LittleEndian.Uint32(raw[offMiscSelect:]),
		MiscMask:       binary.LittleEndian.Uint32(raw[offMiscMask:]),
		Vendor:         vendor,
		Date:           fmt.Sprintf("%08x", binary.LittleEndian.Uint32(raw[offDate:])),
	}, nil
}

// SignedHash is the SHA-256 of what the signature covers: the header
// fields up to the modulus and the body from MISCSELECT through ISVSVN.
func SignedHash(raw []byte) []byte {
	h := sha256.New()
	h.Write(raw[:offModulus])
	h.Write(raw[offMiscSelect:offReserved4])
	return h.Sum(nil)
}

// le reads a little-endian unsigned integer.
func le(b []byte) *big.Int {
	be := bytes.Clone(b)
	for i, j := 0, len(be)-1; i < j; i, j = i+1, j-1 {
		be[i], be[j] = be[j], be[i]
	}
	return new(big.Int).SetBytes(be)
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}
