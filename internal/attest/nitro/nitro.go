// Package nitro verifies AWS Nitro Enclaves attestation documents offline:
// a COSE_Sign1 (ES384) over a CBOR document whose certificate chains,
// through its cabundle, to the AWS Nitro root pinned by SHA-256.
package nitro

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"math/big"
	"slices"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/cloister-cc/cloister/internal/attest"
)

// RootSHA256 pins the AWS Nitro Enclaves root ("aws.nitro-enclaves").
const RootSHA256 = "641a0321a3e244efe456463195d606317ed7cdcc3c1756e09893f3c68f79bb5b"

// algES384 is COSE's ECDSA with SHA-384.
const algES384 = -35

// document is the attestation document (CBOR payload).
type document struct {
	ModuleID    string          `cbor:"module_id"`
	Digest      string          `cbor:"digest"`
	Timestamp   uint64          `cbor:"timestamp"`
	PCRs        map[uint][]byte `cbor:"pcrs"`
	Certificate []byte          `cbor:"certificate"`
	CABundle    [][]byte        `cbor:"cabundle"`
	PublicKey   []byte          `cbor:"public_key"`
	UserData    []byte          `cbor:"user_data"`
	Nonce       []byte          `cbor:"nonce"`
}

// coseSign1 is a COSE_Sign1 message (RFC 9052 4.2).
type coseSign1 struct {
	_           struct{} `cbor:",toarray"`
	Protected   []byte
	Unprotected cbor.RawMessage
	Payload     []byte
	Signature   []byte
}

// Options of a verification.
type Options struct {
	At time.Time
	// RootSHA256 replaces the pinned root (tests of foreign roots).
	RootSHA256 string
	// TestRoots are taken beside the pinned root: an insecure test's
	// only. Claims verified by one say so (Claims.TestRoot).
	TestRoots []*x509.Certificate
}

var decMode, _ = cbor.DecOptions{DupMapKey: cbor.DupMapKeyEnforcedAPF, MaxNestedLevels: 8}.DecMode()

// Verify checks the document and returns its claims (with those read so
// far on a rejection).
func Verify(raw []byte, opts Options) (*attest.Claims, error) {
	if opts.At.IsZero() {
		return nil, errors.New("nitro: a verification time is required")
	}
	pin := opts.RootSHA256
	if pin == "" {
		pin = RootSHA256
	}
	var msg coseSign1
	rest, err := decMode.UnmarshalFirst(untag(raw), &msg)
	if err != nil {
		return nil, attest.Reject(attest.CheckFormat, "not a COSE_Sign1 attestation document: %v", err)
	}
	if len(rest) > 0 {
		return nil, attest.Reject(attest.CheckFormat, "%d trailing bytes after the attestation document", len(rest))
	}
	var header map[int]any
	if err := decMode.Unmarshal(msg.Protected, &header); err != nil {
		return nil, attest.Reject(attest.CheckFormat, "protected header: %v", err)
	}
	if alg, _ := header[1].(int64); alg != algES384 {
		return nil, attest.Reject(attest.CheckFormat, "COSE algorithm %v, want ES384 (-35)", header[1])
	}
	var doc document
	if err := decMode.Unmarshal(msg.Payload, &doc); err != nil {
		return nil, attest.Reject(attest.CheckFormat, "attestation document payload: %v", err)
	}
	if doc.ModuleID == "" || doc.Digest != "SHA384" || len(doc.Certificate) == 0 || len(doc.CABundle) == 0 || len(doc.PCRs) == 0 {
		return nil, attest.Reject(attest.CheckFormat, "attestation document lacks module_id, digest SHA384, pcrs, certificate or cabundle")
	}
	claims := &attest.Claims{
		Type: attest.Nitro, ReportData: doc.UserData, Nonce: doc.Nonce, PublicKey: doc.PublicKey,
		Nitro: &attest.NitroIdentity{ModuleID: doc.ModuleID, PCRs: map[int]attest.Bytes{}},
	}
	// PCR0 to PCR4 and PCR8 measure the image, the instance and the
	// signer; PCR16 up are what the enclave extended at run time (a
	// Cloister orchestrator: the manifests it applied).
	for i, v := range doc.PCRs {
		if i <= 4 || i == 8 || (i >= attest.NitroManifestPCR && i < attest.NitroManifestPCR+attest.NitroManifestSlots) {
			claims.Nitro.PCRs[int(i)] = v
		}
	}
	// An enclave started in debug mode reports PCR0, PCR1 and PCR2 as zero.
	claims.Debug = allZero(doc.PCRs[0]) && allZero(doc.PCRs[1]) && allZero(doc.PCRs[2])

	leaf, err := attest.ParseCertificate(doc.Certificate)
	if err != nil {
		return claims, attest.Reject(attest.CheckFormat, "certificate: %v", err)
	}
	bundle := make([]*x509.Certificate, len(doc.CABundle))
	for i, der := range doc.CABundle {
		if bundle[i], err = attest.ParseCertificate(der); err != nil {
			return claims, attest.Reject(attest.CheckFormat, "cabundle[%d]: %v", i, err)
		}
	}
	if d := sha256.Sum256(bundle[0].Raw); hex.EncodeToString(d[:]) != pin {
		if !slices.ContainsFunc(opts.TestRoots, func(c *x509.Certificate) bool { return c.Equal(bundle[0]) }) {
			return claims, attest.Reject(attest.CheckChain, "the cabundle's root %q (SHA-256 %x) is not the pinned AWS Nitro root", bundle[0].Subject.CommonName, d)
		}
		claims.TestRoot = true
	}
	nb, na, err := attest.VerifyChain("the document's certificate chain", append([]*x509.Certificate{leaf}, bundle[1:]...), bundle[0], opts.At)
	if err != nil {
		return claims, err
	}
	claims.NotBefore, claims.NotAfter = nb, na
	key, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P384() || len(msg.Signature) != 96 {
		return claims, attest.Reject(attest.CheckSignature, "want an ES384 signature (96 bytes) by a P-384 key")
	}
	// Sig_structure (RFC 9052 4.4): ["Signature1", protected, external_aad, payload].
	toSign, err := cbor.Marshal([]any{"Signature1", msg.Protected, []byte{}, msg.Payload})
	if err != nil {
		return claims, err
	}
	d := sha512.Sum384(toSign)
	if !ecdsa.Verify(key, d[:], new(big.Int).SetBytes(msg.Signature[:48]), new(big.Int).SetBytes(msg.Signature[48:])) {
		return claims, attest.Reject(attest.CheckSignature, "the document's signature does not verify with its certificate")
	}
	claims.TCBStatus = attest.TCBUpToDate
	return claims, nil
}

// Bound is what a document binds (its user data and nonce), read without
// verifying anything: what a producer checks of the document its Nitro
// Secure Module returned before handing it on.
func Bound(raw []byte) (userData, nonce []byte, err error) {
	var msg coseSign1
	if err := decMode.Unmarshal(untag(raw), &msg); err != nil {
		return nil, nil, attest.Reject(attest.CheckFormat, "not a COSE_Sign1 attestation document: %v", err)
	}
	var doc document
	if err := decMode.Unmarshal(msg.Payload, &doc); err != nil {
		return nil, nil, attest.Reject(attest.CheckFormat, "attestation document payload: %v", err)
	}
	return doc.UserData, doc.Nonce, nil
}

// untag drops COSE_Sign1's optional tag 18 (0xd2).
func untag(raw []byte) []byte {
	if len(raw) > 0 && raw[0] == 0xd2 {
		return raw[1:]
	}
	return raw
}

func allZero(b []byte) bool { return len(b) > 0 && bytes.Count(b, []byte{0}) == len(b) }
