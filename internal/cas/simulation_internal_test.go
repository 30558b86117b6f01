package cas

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The pinned simulation keys are read once per simKeysFresh, not once per
// attestation, and a key written to the files counts after it.
func TestFreshKeysReadOncePerSecond(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys.pem")
	write := func() *ecdsa.PrivateKey {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		der, _ := x509.MarshalPKIXPublicKey(&k.PublicKey)
		if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return k
	}
	first := write()
	now := time.Unix(1000, 0)
	f := &freshKeys{files: pemKeys(file), now: func() time.Time { return now }}
	keyIs := func(want *ecdsa.PrivateKey, when string) {
		t.Helper()
		keys, err := f.Keys()
		if err != nil || len(keys) != 1 || !keys[0].Equal(&want.PublicKey) {
			t.Fatalf("%s: keys %v, %v", when, keys, err)
		}
	}
	keyIs(first, "first read")
	second := write()
	now = now.Add(simKeysFresh / 2)
	keyIs(first, "within a second of the read")
	now = now.Add(simKeysFresh / 2)
	keyIs(second, "a second after the read")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	now = now.Add(-time.Hour) // the clock stepped back: read again
	if keys, err := f.Keys(); err != nil || len(keys) != 0 {
		t.Fatalf("after the file went and the clock stepped back: %v, %v", keys, err)
	}
}
