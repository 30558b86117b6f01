package attest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"testing"
)

// The raw cost of the signature checks the verifiers make, to compare
// with a whole verification: SGX and TDX check P-256 signatures (quote,
// QE report, PCK chain, TCB signing chain, TCB info, QE identity), Nitro
// P-384 (document and its CA bundle), SEV-SNP one P-384 (the report) and
// RSA-4096 PSS (VCEK, ASK, ARK).

func BenchmarkECDSAP256Verify(b *testing.B) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	d := sha256.Sum256([]byte("quote"))
	sig, _ := ecdsa.SignASN1(rand.Reader, key, d[:])
	for b.Loop() {
		if !ecdsa.VerifyASN1(&key.PublicKey, d[:], sig) {
			b.Fatal("no")
		}
	}
}

func BenchmarkECDSAP384Verify(b *testing.B) {
	key, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	d := sha512.Sum384([]byte("document"))
	sig, _ := ecdsa.SignASN1(rand.Reader, key, d[:])
	for b.Loop() {
		if !ecdsa.VerifyASN1(&key.PublicKey, d[:], sig) {
			b.Fatal("no")
		}
	}
}

func BenchmarkRSA4096PSSVerify(b *testing.B) {
	key, err := rsa.GenerateKey(rand.Reader, 4096)
	if err != nil {
		b.Fatal(err)
	}
	d := sha512.Sum384([]byte("certificate"))
	opts := &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}
	sig, _ := rsa.SignPSS(rand.Reader, key, crypto.SHA384, d[:], opts)
	b.ResetTimer()
	for b.Loop() {
		if rsa.VerifyPSS(&key.PublicKey, crypto.SHA384, d[:], sig, opts) != nil {
			b.Fatal("no")
		}
	}
}
