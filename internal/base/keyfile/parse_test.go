package keyfile

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

func publicPEM(t testing.TB, curve elliptic.Curve) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// A public key from outside (a LAS pod's answer, a pod's environment, a
// resource's spec) is a PEM P-256 key or an error that says what is wrong.
func TestParsePublic(t *testing.T) {
	p256 := publicPEM(t, elliptic.P256())
	for _, tt := range []struct{ name, in, want string }{
		{"P-256", p256, ""},
		{"with a comment before it", "# LAS las, node a\n" + p256, ""},
		{"empty", "", "not a PEM"},
		{"a private key", strings.ReplaceAll(p256, "PUBLIC KEY", "PRIVATE KEY"), "not a PEM \"PUBLIC KEY\""},
		{"P-384", publicPEM(t, elliptic.P384()), "want ECDSA P-256"},
		{"garbage DER", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "asn1"},
	} {
		k, err := ParsePublic([]byte(tt.in))
		if tt.want == "" && (err != nil || k == nil) {
			t.Errorf("%s: %v", tt.name, err)
		}
		if tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// Whatever arrives, ParsePublic returns a P-256 key or an error, never
// panics.
func FuzzParsePublic(f *testing.F) {
	f.Add([]byte(publicPEM(f, elliptic.P256())))
	f.Add([]byte(publicPEM(f, elliptic.P384())))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParsePublic(data)
		if err == nil && (k == nil || k.Curve != elliptic.P256()) {
			t.Fatalf("accepted %v", k)
		}
	})
}

// Whatever arrives, ParsePrivate returns a P-256 key whose public half is
// on the curve, or an error.
func FuzzParsePrivate(f *testing.F) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	ec, _ := x509.MarshalECPrivateKey(k)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ec}))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParsePrivate(data)
		if err != nil {
			return
		}
		if k == nil || k.Curve != elliptic.P256() {
			t.Fatalf("accepted %v", k)
		}
		if _, err := k.PublicKey.ECDH(); err != nil {
			t.Fatalf("accepted a key whose public point is invalid: %v", err)
		}
	})
}

// PublicPEM writes what ParsePublic reads back.
func TestPublicPEMRoundTrip(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := PublicPEM(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParsePublic([]byte(s))
	if err != nil || !back.Equal(&k.PublicKey) {
		t.Errorf("round trip: %v", err)
	}
}
