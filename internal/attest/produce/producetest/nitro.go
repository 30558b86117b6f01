package producetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// NSM is a Nitro Secure Module whose documents chain to a test root: the
// shape of AWS's (COSE_Sign1, ES384, a leaf and a cabundle), never its
// root, so they verify only where that root is trusted as a test root.
type NSM struct {
	// PCRs are the enclave's measurements (PCR index to 48 bytes).
	PCRs map[uint][]byte
	// Tamper, when set, changes the payload's user data after signing.
	Tamper bool
	// Replay, when set, is returned instead of a new document.
	Replay []byte

	root, leaf       *x509.Certificate
	rootKey, leafKey *ecdsa.PrivateKey
	locked           map[uint16]bool
}

// NewNSM makes a module with a fresh test root, valid around now.
func NewNSM(now time.Time) (*NSM, error) {
	rootKey, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test.nitro-enclaves"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, err
	}
	root, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "i-test-enc0.test"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(3 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err = x509.CreateCertificate(rand.Reader, leafTmpl, root, &leafKey.PublicKey, rootKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pcrs := map[uint][]byte{}
	for i, name := range []string{"PCR0", "PCR1", "PCR2"} {
		d := sha512.Sum384([]byte(name))
		pcrs[uint(i)] = d[:]
	}
	return &NSM{PCRs: pcrs, root: root, leaf: leaf, rootKey: rootKey, leafKey: leafKey}, nil
}

// ExtendPCR implements produce.NSM as the module does: PCR16 and up,
// unless locked.
func (m *NSM) ExtendPCR(index uint16, data []byte) error {
	if index < 16 || index > 31 || m.locked[index] {
		return fmt.Errorf("PCR%d cannot be extended", index)
	}
	prev := m.PCRs[uint(index)]
	if prev == nil {
		prev = make([]byte, sha512.Size384)
	}
	d := sha512.Sum384(append(append([]byte{}, prev...), data...))
	m.PCRs[uint(index)] = d[:]
	return nil
}

// LockPCR implements produce.NSM.
func (m *NSM) LockPCR(index uint16) error {
	if m.locked == nil {
		m.locked = map[uint16]bool{}
	}
	m.locked[index] = true
	return nil
}

// Root is the test root.
func (m *NSM) Root() *x509.Certificate { return m.root }

// Attestation implements produce.NSM.
func (m *NSM) Attestation(nonce, userData, publicKey []byte) ([]byte, error) {
	if m.Replay != nil {
		return m.Replay, nil
	}
	doc := map[string]any{
		"module_id": "i-test-enc0", "digest": "SHA384", "timestamp": uint64(time.Now().UnixMilli()),
		"pcrs": m.PCRs, "certificate": m.leaf.Raw, "cabundle": [][]byte{m.root.Raw},
		"public_key": publicKey, "user_data": userData, "nonce": nonce,
	}
	payload, err := cbor.Marshal(doc)
	if err != nil {
		return nil, err
	}
	protected, err := cbor.Marshal(map[int]int{1: -35})
	if err != nil {
		return nil, err
	}
	toSign, err := cbor.Marshal([]any{"Signature1", protected, []byte{}, payload})
	if err != nil {
		return nil, err
	}
	d := sha512.Sum384(toSign)
	r, s, err := ecdsa.Sign(rand.Reader, m.leafKey, d[:])
	if err != nil {
		return nil, err
	}
	sig := make([]byte, 96)
	r.FillBytes(sig[:48])
	s.FillBytes(sig[48:])
	if m.Tamper {
		doc["user_data"] = append([]byte("tampered:"), userData...)
		if payload, err = cbor.Marshal(doc); err != nil {
			return nil, err
		}
	}
	return cbor.Marshal([]any{protected, map[int]any{}, payload, sig})
}
