package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
)

// Sealed for one key, service and policy; opened by that key for them
// only.
func TestSealOpen(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	want := Content{Env: map[string]string{"K": "v"}, Secrets: map[string]map[string]string{"k": {"Hex": "00"}}}
	sealed, err := Seal(&key.PublicKey, "shop", "web", want)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key             *ecdsa.PrivateKey
		policy, service string
		opens           bool
	}{{key, "shop", "web", true}, {other, "shop", "web", false}, {key, "shop", "db", false}, {key, "bank", "web", false}} {
		r := &AttestResult{Sealed: sealed}
		err := r.Open(tc.key, tc.policy, tc.service)
		if (err == nil) != tc.opens || (tc.opens && r.Env["K"] != "v") {
			t.Errorf("open as %s/%s: %v (env %v)", tc.policy, tc.service, err, r.Env)
		}
	}
}

// BenchmarkSeal is what sealing adds to each attestation at CAS.
func BenchmarkSeal(b *testing.B) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c := Content{Env: map[string]string{"K": "4141fc9a80227aa10fbc52944366f3ca"}, Files: map[string]string{"/run/tls/key.pem": "-----BEGIN PRIVATE KEY-----"}}
	for b.Loop() {
		if _, err := Seal(&key.PublicKey, "shop", "web", c); err != nil {
			b.Fatal(err)
		}
	}
}
