package produce_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/las"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	"github.com/cloister-cc/cloister/internal/las/aesm/aesmtest"
	"github.com/cloister-cc/cloister/internal/las/lasclient"
)

// enclaveBody is an enclave's report body: MODE64BIT, MRENCLAVE e7...,
// MRSIGNER 5a..., ISVSVN 3.
func enclaveBody() []byte {
	b := producetest.EnclaveBody(0xe7, 0x5a)
	b[258] = 3
	return b
}

// gramine mounts a fake /dev/attestation and returns it with its signer.
func gramine(t *testing.T, remote string) (string, *producetest.SGXSigner) {
	t.Helper()
	s, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "attestation")
	producetest.MountGramine(t, dir, &producetest.GramineFS{Signer: s, Body: enclaveBody(), RemoteAttestation: remote, CPU: producetest.NewCPU()})
	return dir, s
}

func verifySGX(t *testing.T, s *producetest.SGXSigner, ev attest.Evidence) *attest.Claims {
	t.Helper()
	c, err := s.Verify(ev.Raw, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// With remote attestation on, Gramine quotes what the enclave wrote;
// Detect finds it.
func TestGramineQuotes(t *testing.T) {
	dir, s := gramine(t, "dcap")
	p, err := produce.Detect(context.Background(), produce.Paths{TSM: "/nonexistent", SEVGuest: "/nonexistent", TDXGuest: "/nonexistent", NSM: "/nonexistent", Gramine: dir})
	if err != nil {
		t.Fatal(err)
	}
	if p.Type() != attest.SGX {
		t.Fatalf("detected %s", p.Type())
	}
	ev, err := p.Quote(context.Background(), []byte("key hash"))
	if err != nil {
		t.Fatal(err)
	}
	c := verifySGX(t, s, ev)
	if !bytes.HasPrefix(c.ReportData, []byte("key hash")) || c.SGX.MRENCLAVE[0] != 0xe7 || c.SGX.ISVSVN != 3 {
		t.Errorf("claims %+v %+v", c, c.SGX)
	}
	if _, err := p.Quote(context.Background(), make([]byte, 65)); err == nil {
		t.Error("65 bytes of report data accepted")
	}
}

// Without remote attestation the enclave's REPORT goes to the node's LAS,
// which has the quoting enclave (a fake AESM) quote it; without a LAS the
// error says what to set.
func TestGramineReportThroughLAS(t *testing.T) {
	dir, s := gramine(t, "none")
	g := &produce.Gramine{Dir: dir}
	if _, err := g.Quote(context.Background(), []byte("x")); !errors.Is(err, produce.ErrNoRemoteAttestation) || !strings.Contains(err.Error(), `"none"`) {
		t.Fatalf("without LAS: %v", err)
	}
	sock, _ := aesmtest.Start(t, s)
	dcap := &las.DCAP{Client: &aesm.Client{Socket: sock}}
	srv := httptest.NewServer((&las.Server{Probe: &las.Probe{DevRoot: t.TempDir()}, DCAP: dcap}).Handler())
	t.Cleanup(srv.Close)
	g.LAS = &lasclient.Client{URL: srv.URL}
	ev, err := g.Quote(context.Background(), []byte("key hash"))
	if err != nil {
		t.Fatal(err)
	}
	if c := verifySGX(t, s, ev); !bytes.HasPrefix(c.ReportData, []byte("key hash")) || c.SGX.MRENCLAVE[0] != 0xe7 {
		t.Errorf("claims %+v", c)
	}
	// The enclave targeted its REPORT at the quoting enclave LAS named.
	ti, err := os.ReadFile(filepath.Join(dir, "target_info"))
	if err != nil || !bytes.Equal(ti, s.TargetInfo()) {
		t.Errorf("target_info %x %v", ti, err)
	}
}

// A LAS that hands back a quote over other report data is refused.
func TestGramineRefusesAnotherQuote(t *testing.T) {
	dir, s := gramine(t, "none")
	other := enclaveBody()
	copy(other[320:], "someone else's")
	q, err := s.Quote(other)
	if err != nil {
		t.Fatal(err)
	}
	g := &produce.Gramine{Dir: dir, LAS: fixedLAS{ti: s.TargetInfo(), quote: q}}
	if _, err := g.Quote(context.Background(), []byte("mine")); !errors.Is(err, produce.ErrReportDataDiffers) {
		t.Errorf("err %v", err)
	}
}

type fixedLAS struct{ ti, quote []byte }

func (f fixedLAS) TargetInfo(context.Context) ([]byte, error) { return f.ti, nil }
func (f fixedLAS) QuoteReport(context.Context, []byte) (attest.Evidence, error) {
	return attest.Evidence{Type: attest.SGX, Raw: f.quote}, nil
}

// The fake's sealing keys follow the enclave's identity, as EGETKEY's.
func TestGramineSealKeys(t *testing.T) {
	s, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cpu := producetest.NewCPU()
	key := func(body []byte, name string) []byte {
		dir := filepath.Join(t.TempDir(), "attestation")
		producetest.MountGramine(t, dir, &producetest.GramineFS{Signer: s, Body: body, RemoteAttestation: "dcap", CPU: cpu})
		k, err := os.ReadFile(filepath.Join(dir, "keys", name))
		if err != nil || len(k) != 16 {
			t.Fatalf("%s: %x %v", name, k, err)
		}
		return k
	}
	a, b := enclaveBody(), enclaveBody()
	b[64] = 0xe8 // another MRENCLAVE, the same MRSIGNER
	if bytes.Equal(key(a, "_sgx_mrenclave"), key(b, "_sgx_mrenclave")) {
		t.Error("two enclaves share an MRENCLAVE key")
	}
	if !bytes.Equal(key(a, "_sgx_mrsigner"), key(b, "_sgx_mrsigner")) {
		t.Error("one signer's enclaves differ in their MRSIGNER key")
	}
	if !bytes.Equal(key(a, "_sgx_mrenclave"), key(a, "_sgx_mrenclave")) {
		t.Error("one enclave's key changed between mounts")
	}
}
