package snp

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-sev-guest/verify/testdata"

	"github.com/cloister-cc/cloister/internal/attest"
)

// go-sev-guest's real Milan report and its VCEK; they verify at
// 2023-01-01.
var vectorTime = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)

func TestRealReportVerifies(t *testing.T) {
	c, err := Verify(testdata.AttestationBytes, Options{At: vectorTime, VCEK: testdata.VcekBytes})
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != attest.SNP || len(c.SNP.Measurement) != 48 || c.TCBStatus != attest.TCBUpToDate {
		t.Errorf("claims %+v", c)
	}
	t.Logf("measurement %s policy %#x debug %v reported TCB %#x", c.SNP.Measurement, c.SNP.GuestPolicy, c.Debug, c.SNP.ReportedTCB)
	// Its guest policy allows debugging: the default policy refuses it.
	if err := (&attest.Policy{}).Check(c); c.Debug && attest.CheckOf(err) != attest.CheckDebug {
		t.Errorf("default policy on a debug-allowing report: %v", err)
	}
}

func TestRejections(t *testing.T) {
	raw := testdata.AttestationBytes
	flip := func(i int) []byte { c := bytes.Clone(raw); c[i] ^= 1; return c }
	for _, tc := range []struct {
		name   string
		raw    []byte
		opts   Options
		check  attest.Check
		reason string
	}{
		{"flipped byte in the measurement", flip(0x90), Options{At: vectorTime, VCEK: testdata.VcekBytes}, attest.CheckSignature, ""},
		{"VCEK expired", raw, Options{At: time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC), VCEK: testdata.VcekBytes}, attest.CheckValidity, ""},
		{"no VCEK", raw, Options{At: vectorTime}, attest.CheckCollateral, "--collateral"},
		{"trailing bytes", append(bytes.Clone(raw), 0), Options{At: vectorTime, VCEK: testdata.VcekBytes}, attest.CheckFormat, "1 trailing bytes"},
		{"truncated", raw[:100], Options{At: vectorTime, VCEK: testdata.VcekBytes}, attest.CheckFormat, "truncated"},
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
	f.Add(testdata.AttestationBytes)
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, err := Verify(raw, Options{At: vectorTime, VCEK: testdata.VcekBytes})
		if err != nil && attest.CheckOf(err) == "" {
			t.Fatalf("unnamed rejection: %v", err)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	for b.Loop() {
		if _, err := Verify(testdata.AttestationBytes, Options{At: vectorTime, VCEK: testdata.VcekBytes}); err != nil {
			b.Fatal(err)
		}
	}
}
