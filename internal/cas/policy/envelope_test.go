package policy

import (
	"crypto/ecdsa"
	"crypto/rand"
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
	s := &Signed{Policy: doc(t, pubs(k1, k2), replace("threshold: 1", "threshold: 2")), Link: Link{Version: 1}}
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
	// A stranger's signature is refused, not ignored: CAS would keep it.
	if _, err := Signers(d, s.Link, s.Signatures, keys); err == nil || !strings.Contains(err.Error(), "signatures[1]: "+Fingerprint(&outsider.PublicKey)+" is not among the keys") {
		t.Errorf("an outsider's signature: %v", err)
	}
	s.Signatures = s.Signatures[:1]
	signers, err := Signers(d, s.Link, s.Signatures, keys)
	if err != nil || len(signers) != 1 || !signers[Fingerprint(&k1.PublicKey)] {
		t.Fatalf("signers %v, %v: want k1", signers, err)
	}
	// The signature covers the link: the same document as another
	// version, or after another predecessor, does not verify.
	for _, l := range []Link{{Version: 2, Predecessor: d.Digest()}, {Version: 3, Predecessor: d.Digest()}} {
		if _, err := Signers(d, l, s.Signatures, keys); err == nil || !strings.Contains(err.Error(), "does not verify over this policy as version") {
			t.Errorf("signature for version 1 taken as %+v: %v", l, err)
		}
	}

	// The signature covers the canonical document: another document (one
	// changed field) does not verify with it, and the error names it.
	changed, _ := Parse([]byte(doc(t, pubs(k1, k2), replace("threshold: 1", "threshold: 2"), replace("validity: 12h", "validity: 1h"))))
	if _, err := Signers(changed, s.Link, s.Signatures, keys); err == nil || !strings.Contains(err.Error(), "signatures[0]: the signature of "+Fingerprint(&k1.PublicKey)+" does not verify") {
		t.Errorf("changed document: %v", err)
	}
	// A flipped bit in the signature.
	bad := append([]Signature(nil), s.Signatures...)
	raw, _ := base64.StdEncoding.DecodeString(bad[0].Signature)
	raw[len(raw)-1] ^= 1
	bad[0].Signature = base64.StdEncoding.EncodeToString(raw)
	if _, err := Signers(d, s.Link, bad, keys); err == nil {
		t.Error("a flipped signature verified")
	}
	// Signing a policy that does not parse says why.
	if err := Sign(&Signed{Policy: "version: x", Link: Link{Version: 1}}, k1); err == nil || !strings.Contains(err.Error(), "version") {
		t.Errorf("signing an invalid policy: %v", err)
	}
}

func TestLinkValidate(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		link Link
		want string
	}{
		{Link{Version: 1}, ""},
		{Link{Version: 2, Predecessor: digest}, ""},
		{Link{}, "version: 0: sign the policy as version 1"},
		{Link{Version: 1, Predecessor: digest}, "predecessor: version 1 replaces nothing"},
		{Link{Version: 2}, "predecessor: \"\": version 2 needs the digest"},
		{Link{Version: 2, Predecessor: "sha256:" + digest}, "needs the digest (64 hex digits) of version 1"},
	} {
		err := tc.link.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.link, err, tc.want)
		}
	}
}

// A signature made the way before links (the document alone) is named as
// such, so its owners know to sign again rather than suspect tampering.
func TestLegacySignatureNamed(t *testing.T) {
	k, _ := NewKey()
	d, _ := Parse([]byte(doc(t, pubs(k))))
	raw, _ := ecdsa.SignASN1(rand.Reader, k, legacyDigest(d))
	sigs := []Signature{{Signer: Fingerprint(&k.PublicKey), Signature: base64.StdEncoding.EncodeToString(raw)}}
	_, err := Signers(d, Link{Version: 1}, sigs, []*ecdsa.PublicKey{&k.PublicKey})
	if err == nil || !strings.Contains(err.Error(), "the way before versioned signatures: sign it again as version 1") {
		t.Errorf("a legacy signature: %v", err)
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
	s := &Signed{Policy: doc(t, pubs(k)), Link: Link{Version: 1}}
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
