package nitro

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

// vectorTime is the production document's own timestamp (its leaf lives
// ~3 h).
var vectorTime = time.Unix(1665651482, 0)

// load reads the production enclave's document (testdata/evervault-beta,
// its provenance there).
func load(t testing.TB) []byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/evervault-beta/valid-attestation-doc-bytes")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestRealDocumentVerifies(t *testing.T) {
	c, err := Verify(load(t), Options{At: vectorTime})
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != attest.Nitro || c.Nitro.ModuleID == "" || len(c.Nitro.PCRs[0]) != 48 || c.TCBStatus != attest.TCBUpToDate {
		t.Errorf("claims %+v", c)
	}
	t.Logf("module %s debug %v PCR0 %s, %d bytes of user data, %d of nonce, valid %s..%s", c.Nitro.ModuleID, c.Debug,
		c.Nitro.PCRs[0], len(c.ReportData), len(c.Nonce), c.NotBefore, c.NotAfter)
}

func TestRejections(t *testing.T) {
	raw := load(t)
	// Verified once first, so every refusal below holds with the CA
	// bundle remembered as verified.
	if _, err := Verify(raw, Options{At: vectorTime}); err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte { c := bytes.Clone(raw); c[i] ^= 1; return c }
	for _, tc := range []struct {
		name   string
		raw    []byte
		opts   Options
		check  attest.Check
		reason string
	}{
		{"flipped byte in the signature", flip(len(raw) - 5), Options{At: vectorTime}, attest.CheckSignature, "does not verify"},
		{"flipped byte in a PCR", flip(bytes.Index(raw, []byte("pcrs")) + 10), Options{At: vectorTime}, attest.CheckSignature, ""},
		{"after the leaf expired", raw, Options{At: vectorTime.Add(24 * time.Hour)}, attest.CheckValidity, "is valid from"},
		{"before the chain was valid", raw, Options{At: vectorTime.Add(-30 * 24 * time.Hour)}, attest.CheckValidity, ""},
		{"foreign root", raw, Options{At: vectorTime, RootSHA256: strings.Repeat("00", 32)}, attest.CheckChain, "not the pinned AWS Nitro root"},
		{"trailing bytes", append(bytes.Clone(raw), 0), Options{At: vectorTime}, attest.CheckFormat, "1 trailing bytes"},
		{"truncated", raw[:len(raw)/2], Options{At: vectorTime}, attest.CheckFormat, "not a COSE_Sign1"},
		{"empty", nil, Options{At: vectorTime}, attest.CheckFormat, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.raw, tc.opts)
			if attest.CheckOf(err) != tc.check || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("got %v, want %s (%q)", err, tc.check, tc.reason)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(load(f))
	f.Add([]byte{0x84, 0x40, 0xa0, 0x40, 0x40})
	f.Fuzz(func(t *testing.T, raw []byte) {
		attesttest.CountExec()
		_, err := Verify(raw, Options{At: vectorTime})
		if err != nil && attest.CheckOf(err) == "" {
			t.Fatalf("unnamed rejection: %v", err)
		}
	})
}
