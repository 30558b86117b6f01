package wire

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"strings"
	"testing"
)

func vouched(t testing.TB, key *ecdsa.PrivateKey, st Statement) *Vouched {
	t.Helper()
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(raw)
	sig, err := ecdsa.SignASN1(rand.Reader, key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	return &Vouched{Statement: raw, Signature: sig}
}

// A statement opens only signed by the key it names, over the nonce
// asked, of its type, with no field unknown.
func TestOpenStatement(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	nonce := []byte(strings.Repeat("n", 32))
	good := Statement{Type: StatementType, Nonce: nonce, TLSKey: der, State: "ready"}
	if st, pub, err := vouched(t, key, good).Open(nonce); err != nil || !pub.Equal(&key.PublicKey) || st.State != "ready" {
		t.Fatalf("%+v %v", st, err)
	}
	for name, tc := range map[string]struct {
		v     *Vouched
		nonce []byte
		says  string
	}{
		"another nonce":     {vouched(t, key, good), []byte(strings.Repeat("m", 32)), "another nonce"},
		"another key signs": {vouched(t, other, good), nonce, "not by the key it names"},
		"another type":      {vouched(t, key, Statement{Type: "x", Nonce: nonce, TLSKey: der}), nonce, "type"},
		"no key":            {vouched(t, key, Statement{Type: StatementType, Nonce: nonce}), nonce, "tlsKey"},
		"an unknown field":  {&Vouched{Statement: []byte(`{"type":"` + StatementType + `","extra":1}`)}, nonce, "extra"},
		"an oversized one":  {&Vouched{Statement: make([]byte, MaxStatement+1)}, nonce, "at most"},
	} {
		if _, _, err := tc.v.Open(tc.nonce); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: want an error saying %q, got %v", name, tc.says, err)
		}
	}
	for _, n := range [][]byte{nil, make([]byte, MinNonce-1), make([]byte, MaxNonce+1)} {
		if CheckNonce(n) == nil {
			t.Errorf("a nonce of %d bytes taken", len(n))
		}
	}
}

func FuzzOpenStatement(f *testing.F) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	nonce := []byte(strings.Repeat("n", 32))
	v := vouched(f, key, Statement{Type: StatementType, Nonce: nonce, TLSKey: der})
	f.Add(v.Statement, v.Signature)
	f.Fuzz(func(t *testing.T, statement, sig []byte) {
		st, pub, err := (&Vouched{Statement: statement, Signature: sig}).Open(nonce)
		if err == nil && (st.Type != StatementType || pub == nil || string(st.Nonce) != string(nonce)) {
			t.Fatalf("%+v", st)
		}
	})
}
