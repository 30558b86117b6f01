package produce

import (
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/nitro"
	"github.com/cloister-cc/cloister/internal/attest/tdx"
)

// What a platform hands back (an SEV-SNP report and its certificate
// table, a TDX quote, a Nitro document) is outside the guest's trust: its
// checks never panic, and take only what binds the report data asked for.
func FuzzReturned(f *testing.F) {
	f.Add([]byte{}, []byte{}, byte(0))
	f.Add(make([]byte, 1184), []byte{1, 2, 3}, byte(7))
	f.Fuzz(func(t *testing.T, out, aux []byte, seed byte) {
		attesttest.CountExec()
		var rd [ReportDataSize]byte
		rd[0] = seed
		if raw, err := snpEvidence(out, aux, rd); err == nil && (len(raw) < 1184 || raw[0x50] != rd[0]) {
			t.Fatalf("took a report that does not bind the report data")
		}
		_, _, _ = tdx.ReportData(out)
		_, _, _ = nitro.Bound(out)
		_ = checkBound(attest.SNP, out, rd[:])
	})
}
