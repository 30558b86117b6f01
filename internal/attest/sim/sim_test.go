package sim

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

var issued = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func evidence(t testing.TB, key *ecdsa.PrivateKey) []byte {
	raw, err := Generate(key, attest.Claims{
		Type: attest.SGX, Insecure: false, TCBStatus: attest.TCBUpToDate, ReportData: attest.Bytes{1, 2, 3},
		SGX: &attest.SGXIdentity{MRENCLAVE: attest.Bytes{0x68, 0x82}, ISVSVN: 2},
	}, issued, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestRoundTripIsAlwaysInsecure(t *testing.T) {
	key := newKey(t)
	c, err := Verify(evidence(t, key), issued.Add(time.Minute), &key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != attest.Sim || !c.Insecure || c.SGX.MRENCLAVE.String() != "6882" || c.ReportData.String() != "010203" ||
		!c.NotAfter.Equal(issued.Add(time.Hour)) {
		t.Errorf("claims %+v", c)
	}
	if err := (&attest.Policy{}).Check(c); attest.CheckOf(err) != attest.CheckSimulation {
		t.Errorf("default policy on sim evidence: %v, want a simulation rejection", err)
	}
	if err := (&attest.Policy{AllowSimulation: true, Identities: []attest.Identity{{Type: attest.SGX, MRENCLAVE: attest.Bytes{0x68, 0x82}}}}).Check(c); err != nil {
		t.Errorf("policy allowing simulation: %v", err)
	}
}

// A document that claims insecure=false is still insecure.
func TestInsecureCannotBeSwitchedOff(t *testing.T) {
	key := newKey(t)
	raw := evidence(t, key)
	var env envelope
	_ = json.Unmarshal(raw, &env)
	payload := bytes.Replace(env.Payload, []byte(`"insecure":true`), []byte(`"insecure":false`), 1)
	if bytes.Equal(payload, env.Payload) {
		t.Fatal("payload has no insecure field to flip")
	}
	// Re-sign honestly: the signer may say what it likes; the verifier
	// still marks it insecure.
	forged := resign(t, key, payload)
	c, err := Verify(forged, issued)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Insecure {
		t.Error("sim claims verified as secure")
	}
}

func resign(t *testing.T, key *ecdsa.PrivateKey, payload []byte) []byte {
	t.Helper()
	d := sha256Sum(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, key, d)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(envelope{Payload: payload, Signature: sig})
	return raw
}

func TestRejections(t *testing.T) {
	key, other := newKey(t), newKey(t)
	raw := evidence(t, key)
	var env envelope
	_ = json.Unmarshal(raw, &env)
	flip := func(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 1; return c }
	mutate := func(f func(*envelope)) []byte {
		e := envelope{Payload: bytes.Clone(env.Payload), Signature: bytes.Clone(env.Signature)}
		f(&e)
		out, _ := json.Marshal(e)
		return out
	}
	for _, tc := range []struct {
		name    string
		raw     []byte
		at      time.Time
		trusted []*ecdsa.PublicKey
		check   attest.Check
		reason  string
	}{
		{"flipped byte in the signed body", mutate(func(e *envelope) { e.Payload = bytes.Replace(e.Payload, []byte("6882"), []byte("6883"), 1) }), issued, nil, attest.CheckSignature, "does not verify"},
		{"flipped byte in the signature", mutate(func(e *envelope) { e.Signature = flip(e.Signature, 10) }), issued, nil, attest.CheckSignature, ""},
		{"foreign key", raw, issued, []*ecdsa.PublicKey{&other.PublicKey}, attest.CheckChain, "which is not pinned: a forged quote"},
		{"after expiry", raw, issued.Add(2 * time.Hour), nil, attest.CheckValidity, "valid from 2026-11-22T12:00:00Z to 2026-11-22T13:00:00Z"},
		{"before issue", raw, issued.Add(-time.Second), nil, attest.CheckValidity, ""},
		{"trailing bytes", append(bytes.Clone(raw), []byte(` {}`)...), issued, nil, attest.CheckFormat, "trailing bytes"},
		{"truncated", raw[:len(raw)/2], issued, nil, attest.CheckFormat, "not simulated evidence"},
		{"empty", nil, issued, nil, attest.CheckFormat, ""},
		{"names in another case", bytes.Replace(raw, []byte(`"payload"`), []byte(`"Payload"`), 1), issued, nil, attest.CheckFormat, "not in the form"},
		{"indented", bytes.Replace(raw, []byte(`,"signature"`), []byte(`, "signature"`), 1), issued, nil, attest.CheckFormat, "not in the form"},
		{"other format", mutate(func(e *envelope) {
			e.Payload = bytes.Replace(e.Payload, []byte("sim-evidence/v1"), []byte("sim-evidence/v9"), 1)
		}), issued, nil, attest.CheckFormat, "format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.raw, tc.at, tc.trusted...)
			if attest.CheckOf(err) != tc.check || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("got %v, want %s (%q)", err, tc.check, tc.reason)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	key := newKey(f)
	f.Add(evidence(f, key))
	f.Add([]byte(`{"payload":"e30=","signature":""}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		attesttest.CountExec()
		c, err := Verify(raw, issued)
		if err == nil && (!c.Insecure || c.Type != attest.Sim) {
			t.Fatalf("verified sim evidence not marked insecure: %+v", c)
		}
		if err != nil && attest.CheckOf(err) == "" {
			t.Fatalf("unnamed rejection: %v", err)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	key := newKey(b)
	raw := evidence(b, key)
	for b.Loop() {
		if _, err := Verify(raw, issued); err != nil {
			b.Fatal(err)
		}
	}
}

func sha256Sum(b []byte) []byte { d := sha256.Sum256(b); return d[:] }
