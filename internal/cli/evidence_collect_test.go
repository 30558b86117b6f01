package cli

import (
	"context"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sevclient "github.com/google/go-sev-guest/client"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/attest/tdx"
)

func TestEvidenceCollectSNPThroughConfigfs(t *testing.T) {
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tsm := s.ServeVM(t, filepath.Join(dir, "tsm"), nil, nil)
	roots := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(roots, s.RootsPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	ev := filepath.Join(dir, "evidence.bin")
	rd := strings.Repeat("ab", 32) + strings.Repeat("cd", 32)
	_, stderr, err := run(t, "evidence", "collect", "--tsm", tsm, "--report-data", rd, "-o", ev)
	if err != nil || !strings.Contains(stderr, "snp evidence") {
		t.Fatalf("collect: %v\n%s", err, stderr)
	}
	out, stderr, err := run(t, "evidence", "verify", "--type", "snp", "--evidence", ev, "--insecure-test-roots", roots)
	if err != nil || !strings.Contains(out, "accepted: snp") || !strings.Contains(out, "reportData:   "+rd) ||
		!strings.Contains(out, "testRoot:") || !strings.Contains(stderr, "INSECURE") {
		t.Errorf("verify with the test roots: %v\n%s%s", err, out, stderr)
	}
	out, _, err = run(t, "evidence", "verify", "--type", "snp", "--evidence", ev)
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: chain") {
		t.Errorf("verify without the test roots: exit %d\n%s", exitCode(err), out)
	}
	// Base64 on standard output verifies the same.
	b64, _, err := run(t, "evidence", "collect", "--tsm", tsm, "--report-data", rd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ev, []byte(b64), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, "evidence", "verify", "--type", "snp", "--evidence", ev, "--insecure-test-roots", roots); err != nil {
		t.Errorf("base64: %v\n%s", err, out)
	}
	for _, bad := range [][]string{{"--report-data", strings.Repeat("00", 65)}, {"--report-data", "xyz"}, {"--nonce", "00"}} {
		if _, _, err := run(t, append([]string{"evidence", "collect", "--tsm", tsm}, bad...)...); err == nil {
			t.Errorf("%v taken", bad)
		}
	}
}

// A TDX quoting service that answers with a quote over other report data
// is refused; its own report data is taken.
func TestEvidenceCollectTDXThroughConfigfs(t *testing.T) {
	tsm := filepath.Join(t.TempDir(), "tsm")
	quote := producetest.TDXQuote(t)
	producetest.ServeForTest(t, &producetest.TSMFolder{Root: tsm, Provider: producetest.ProviderTDX, Answer: producetest.QuoteAnswer(quote)})
	_, quoted, err := tdx.ReportData(quote)
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := run(t, "evidence", "collect", "--tsm", tsm, "--report-data", hex.EncodeToString(quoted)); err != nil || !strings.Contains(stderr, "tdx evidence") {
		t.Errorf("the quote's own report data: %v %s", err, stderr)
	}
	_, _, err = run(t, "evidence", "collect", "--tsm", tsm, "--report-data", "00ff")
	if err == nil || !strings.Contains(err.Error(), "other report data than requested") {
		t.Errorf("other report data: %v", err)
	}
}

func TestEvidenceCollectDevicesAndNitro(t *testing.T) {
	dir := t.TempDir()
	_, _, err := run(t, "evidence", "collect", "--tsm", dir, "--sev-guest", filepath.Join(dir, "sev-guest"), "--tdx-guest", filepath.Join(dir, "tdx"), "--nsm", filepath.Join(dir, "nsm"))
	if err == nil || !strings.Contains(err.Error(), "no evidence producer") {
		t.Errorf("no TEE: %v", err)
	}
	// A report folder that nobody answers is waited for, not forever.
	if err := os.MkdirAll(filepath.Join(dir, "report"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "evidence", "collect", "--tsm", dir, "--timeout", "200ms"); err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("an unanswered folder: %v", err)
	}

	nsm, err := producetest.NewNSM(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var rd [64]byte
	rd[0] = 0x77
	dev, err := s.FakeDevice(map[[64]byte][]byte{rd: rd[:]})
	if err != nil {
		t.Fatal(err)
	}
	var p produce.Producer
	detect = func(context.Context, produce.Paths) (produce.Producer, error) { return p, nil }
	t.Cleanup(func() { detect = produce.Detect })

	p = &produce.Nitro{Module: nsm}
	ev := filepath.Join(dir, "nitro.bin")
	if _, _, err := run(t, "evidence", "collect", "--report-data", "77", "--nonce", "0102", "-o", ev); err != nil {
		t.Fatal(err)
	}
	roots := filepath.Join(dir, "nitro-root.pem")
	if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: nsm.Root().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "evidence", "verify", "--type", "nitro", "--evidence", ev, "--nonce", "0102", "--insecure-test-roots", roots)
	if err != nil || !strings.Contains(out, "reportData:   77") {
		t.Errorf("nitro: %v\n%s", err, out)
	}
	if out, _, err := run(t, "evidence", "verify", "--type", "nitro", "--evidence", ev, "--nonce", "0103", "--insecure-test-roots", roots); exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: nonce") {
		t.Errorf("nitro, another nonce: %v\n%s", err, out)
	}

	p = &produce.SEVGuest{Path: "fake", Open: func(string) (sevclient.Device, error) { return dev, dev.Open("") }}
	ev = filepath.Join(dir, "snp.bin")
	if _, _, err := run(t, "evidence", "collect", "--report-data", "77", "-o", ev); err != nil {
		t.Fatal(err)
	}
	roots = filepath.Join(dir, "amd-test-roots.pem")
	if err := os.WriteFile(roots, s.RootsPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, "evidence", "verify", "--type", "snp", "--evidence", ev, "--insecure-test-roots", roots); err != nil {
		t.Errorf("/dev/sev-guest: %v\n%s", err, out)
	}
	if _, _, err := run(t, "evidence", "collect", "--report-data", "77", "--nonce", "01"); err == nil || !strings.Contains(err.Error(), "--nonce is for Nitro") {
		t.Errorf("--nonce on SEV-SNP: %v", err)
	}
}
