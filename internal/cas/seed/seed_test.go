package seed

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
)

func TestSplitCombine(t *testing.T) {
	s := New()
	shares, c, err := s.Split(3, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(shares) != 5 || c.Threshold() != 3 {
		t.Fatalf("%d shares, threshold %d", len(shares), c.Threshold())
	}
	for _, pick := range [][]int{{0, 1, 2}, {4, 2, 0}, {1, 3, 4}, {0, 1, 2, 3, 4}} {
		var sub []Share
		for _, i := range pick {
			sub = append(sub, shares[i])
		}
		got, err := c.Combine(sub)
		if err != nil || !bytes.Equal(got.Bytes(), s.Bytes()) {
			t.Errorf("shares %v: %v", pick, err)
		}
	}
	// k-1 shares, or k with a repeat, are not enough.
	if _, err := c.Combine(shares[:2]); err == nil || !strings.Contains(err.Error(), "2 of 3 shares: 1 more needed") {
		t.Errorf("two shares: %v", err)
	}
	if _, err := c.Combine([]Share{shares[0], shares[0], shares[1]}); err == nil {
		t.Error("a repeated share counted twice")
	}
	// A tampered share, or one of another seed, is refused by name.
	bad := shares[1]
	bad.Value = bytes.Clone(bad.Value)
	bad.Value[0] ^= 1
	if err := c.Verify(bad); err == nil || !strings.Contains(err.Error(), "share 2 is not a share of this CAS's seed") {
		t.Errorf("tampered share: %v", err)
	}
	other, _, _ := New().Split(3, 5)
	if _, err := c.Combine([]Share{shares[0], shares[1], other[2]}); err == nil {
		t.Error("a share of another seed was combined")
	}
	if _, _, err := s.Split(4, 3); err == nil {
		t.Error("threshold above the owners")
	}
}

func TestKeysAreStableAndSeparate(t *testing.T) {
	s := New()
	back, err := FromBytes(s.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Key("store", 32), back.Key("store", 32)) {
		t.Error("the same seed derived another store key")
	}
	if bytes.Equal(s.Key("store", 32), s.Key("root-ca", 32)) || bytes.Equal(s.Key("store", 32), New().Key("store", 32)) {
		t.Error("keys of different labels or seeds are equal")
	}
}

func TestSealedShares(t *testing.T) {
	alice, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	bob, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	shares, _, _ := New().Split(1, 2)
	sealed, err := SealShare(shares[0], &alice.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenShare(sealed, alice)
	if err != nil || got.ID != shares[0].ID || !bytes.Equal(got.Value, shares[0].Value) {
		t.Fatalf("open: %+v %v", got, err)
	}
	if _, err := OpenShare(sealed, bob); err == nil || !strings.Contains(err.Error(), "does not open with this key") {
		t.Errorf("bob opened alice's share: %v", err)
	}
}
