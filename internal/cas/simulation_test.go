package cas

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
)

// A simulated CAS signs each answer's evidence with the key in its file
// as it is then: a key the operator replaces in the Secret is used without
// a restart, and a file gone for a moment (a Secret volume between two
// versions) keeps the last key.
func TestSelfQuoterFollowsItsKeyFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key.pem")
	write := func() *ecdsa.PrivateKey {
		k, err := keyfile.LoadOrCreate("")
		if err != nil {
			t.Fatal(err)
		}
		der, _ := x509.MarshalECPrivateKey(k)
		if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return k
	}
	tlsKey, _ := keyfile.LoadOrCreate("")
	signedBy := func(q *selfQuoter, k *ecdsa.PrivateKey) error {
		ev, err := q.Evidence()
		if err != nil {
			return err
		}
		_, err = sim.Verify(ev.Raw, time.Now(), &k.PublicKey)
		return err
	}
	if _, err := newSelfQuoter(file, tlsKey); err == nil {
		t.Error("no key file: a quoter")
	}
	first := write()
	q, err := newSelfQuoter(file, tlsKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := signedBy(q, first); err != nil {
		t.Errorf("the first key: %v", err)
	}
	second := write()
	if err := signedBy(q, second); err != nil {
		t.Errorf("the replaced key: %v", err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := signedBy(q, second); err != nil {
		t.Errorf("the file gone: %v", err)
	}
}
