package policy

import (
	"crypto/ecdsa"
	"encoding/base64"
	"strings"
	"testing"
)

func pubs(keys ...*ecdsa.PrivateKey) []string {
	var out []string
	for _, k := range keys {
		out = append(out, string(MarshalPublicKey(&k.PublicKey)))
	}
	return out
}

func TestSignAndVerify(t *testing.T) {
	k1, _ := NewKey()
	k2, _ := NewKey()
	outsider, _ := NewKey()
	s := &Signed{Policy: doc(t, pubs(k1, k2), replace("threshold: 1", "threshold: 2"))}
	for _, k := range []*ecdsa.PrivateKey{k1, outsider, k1} { // k1 twice: replaced, not doubled
		if err := Sign(s, k); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Signatures) != 2 {
		t.Fatalf("%d signatures, want 2 (k1 once, the outsider once)", len(s.Signatures))
	}
	d, _ := Parse([]byte(s.Policy))
	keys, _ := d.OwnerKeys()
	signers, err := Signers(d, s.Signatures, keys)
	if err != nil || len(signers) != 1 || !signers[Fingerprint(&k1.PublicKey)] {
		t.Fatalf("signers %v, %v: want k1 only (the outsider is no owner)", signers, err)
	}

	// The signature covers the canonical document: another document (one
	// changed field) does not verify with it, and the error names it.
	changed, _ := Parse([]byte(doc(t, pubs(k1, k2), replace("threshold: 1", "threshold: 2"), replace("validity: 12h", "validity: 1h"))))
	if _, err := Signers(changed, s.Signatures, keys); err == nil || !strings.Contains(err.Error(), "signatures[0]: the signature of "+Fingerprint(&k1.PublicKey)+" does not verify") {
		t.Errorf("changed document: %v", err)
	}
	// A flipped bit in the signature.
	bad := append([]Signature(nil), s.Signatures...)
	raw, _ := base64.StdEncoding.DecodeString(bad[0].Signature)
	raw[len(raw)-1] ^= 1
	bad[0].Signature = base64.StdEncoding.EncodeToString(raw)
	if _, err := Signers(d, bad, keys); err == nil {
		t.Error("a flipped signature verified")
	}
	// Signing a policy that does not parse says why.
	if err := Sign(&Signed{Policy: "version: x"}, k1); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("signing an invalid policy: %v", err)
	}
}

func TestKeyRoundTrip(t *testing.T) {
	k, _ := NewKey()
	pemKey, err := MarshalKey(k)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseKey(pemKey)
	if err != nil || !back.Equal(k) {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := ParseKey(MarshalPublicKey(&k.PublicKey)); err == nil || !strings.Contains(err.Error(), "want an unencrypted PRIVATE KEY") {
		t.Errorf("public key as private: %v", err)
	}
}

func TestEncryptDecrypt(t *testing.T) {
	casKey, err := NewEncryptionKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := NewEncryptionKey([]byte("0123456789abcdef0123456789abcdef"))
	if EncodePublicKey(again.PublicKey()) != EncodePublicKey(casKey.PublicKey()) {
		t.Fatal("the same seed derived another key")
	}
	other, _ := NewEncryptionKey([]byte("another seed, another CAS key..."))
	k, _ := NewKey()
	s := &Signed{Policy: doc(t, pubs(k))}
	if err := Sign(s, k); err != nil {
		t.Fatal(err)
	}
	e, err := Encrypt(s, casKey.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.Policy, "payments") {
		t.Fatal("the sealed policy shows its content")
	}
	opened, err := Decrypt(e, casKey)
	if err != nil || opened.Policy != s.Policy || len(opened.Signatures) != 1 {
		t.Fatalf("decrypt: %v %+v", err, opened)
	}
	if _, err := Decrypt(e, other); err == nil || !strings.Contains(err.Error(), "encryptionKey: the policy is sealed to key "+KeyID(e.EncryptionKey)) {
		t.Errorf("another CAS: %v", err)
	}
	// Sealed to another key but claiming this one: the AEAD refuses it.
	forged, _ := Encrypt(s, other.PublicKey())
	forged.EncryptionKey = EncodePublicKey(casKey.PublicKey())
	if _, err := Decrypt(forged, casKey); err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Errorf("mislabelled ciphertext: %v", err)
	}
	if _, err := DecodePublicKey("bm90IGEga2V5"); err == nil {
		t.Error("a 9-byte key decoded")
	}
}
