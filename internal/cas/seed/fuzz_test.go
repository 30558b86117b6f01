package seed

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"testing"
)

// FuzzRecoverShare feeds a recovery request's share (its JSON, as
// POST /v1/recover carries it) to the commitment check and the
// combination: only a real share of the seed verifies, and nothing
// panics.
func FuzzRecoverShare(f *testing.F) {
	s := New()
	shares, c, err := s.Split(2, 3)
	if err != nil {
		f.Fatal(err)
	}
	for _, sh := range shares {
		b, _ := json.Marshal(sh)
		f.Add(b)
	}
	f.Add([]byte(`{"id":0,"value":""}`))
	f.Add([]byte(`{"id":256,"value":"AAAA"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var sh Share
		if json.Unmarshal(data, &sh) != nil {
			return
		}
		real := false
		for _, r := range shares {
			real = real || (r.ID == sh.ID && bytes.Equal(r.Value, sh.Value))
		}
		if err := c.Verify(sh); (err == nil) != real {
			t.Fatalf("share %d %x: verified %v, a real share %v", sh.ID, sh.Value, err == nil, real)
		}
		got, err := c.Combine([]Share{sh, shares[0]})
		if err == nil && !bytes.Equal(got.Bytes(), s.Bytes()) {
			t.Fatal("two shares combined into another seed")
		}
	})
}

// FuzzOpenShare opens sealed shares an owner is handed: garbage is an
// error, never a panic or a share.
func FuzzOpenShare(f *testing.F) {
	owner, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	shares, _, err := New().Split(1, 1)
	if err != nil {
		f.Fatal(err)
	}
	sealed, err := SealShare(shares[0], &owner.PublicKey)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed)
	f.Add(sealed[:len(sealed)-1])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		sh, err := OpenShare(data, owner)
		if err == nil && !bytes.Equal(data, sealed) && (sh.ID != shares[0].ID || !bytes.Equal(sh.Value, shares[0].Value)) {
			t.Fatalf("a forged sealed share opened to %+v", sh)
		}
	})
}
