package ownerseal

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
)

// Only the owner opens it, and only for the use it was sealed for.
func TestSealOpensOnlyForItsOwnerAndUse(t *testing.T) {
	owner, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sealed, err := Seal(&owner.PublicKey, []byte("use-a"), []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := Open(owner, []byte("use-a"), sealed); err != nil || string(plain) != "secret" {
		t.Fatalf("the owner: %q %v", plain, err)
	}
	if _, err := Open(other, []byte("use-a"), sealed); err == nil {
		t.Error("another key opened it")
	}
	if _, err := Open(owner, []byte("use-b"), sealed); err == nil {
		t.Error("it opened for another use")
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := Open(owner, []byte("use-a"), sealed); err == nil {
		t.Error("a changed ciphertext opened")
	}
}
