package manifest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"testing"
)

// A signature is what the host hands the enclave with a manifest: any
// string is refused as ErrNotSigned but the owner's own signature.
func FuzzCheckSignature(f *testing.F) {
	owner, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	m := &Manifest{Version: Version, Enclave: Size{CPUs: 2, MemoryMiB: 2048}, Plugins: []Plugin{{Name: "a", Image: "r/a:1", RestartPolicy: "Always"}}}
	good, err := Sign(m, owner)
	if err != nil {
		f.Fatal(err)
	}
	if err := m.CheckSignature(good, &owner.PublicKey); err != nil {
		f.Fatalf("the owner's signature: %v", err)
	}
	for _, seed := range []string{"", good, good[:len(good)-4], "!!", "MEUCIQ==", good + good} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, sig string) {
		err := m.CheckSignature(sig, &owner.PublicKey)
		if sig == good {
			return
		}
		if err == nil {
			// ECDSA signatures are not unique (s and n-s): only another
			// valid signature by the owner may pass, never a forgery.
			t.Logf("another encoding of a valid signature: %q", sig)
			return
		}
		if !errors.Is(err, ErrNotSigned) {
			t.Errorf("%q: %v, not ErrNotSigned", sig, err)
		}
	})
}
