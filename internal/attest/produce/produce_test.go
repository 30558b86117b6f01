package produce_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sevclient "github.com/google/go-sev-guest/client"
	labi "github.com/google/go-sev-guest/client/linuxabi"
	sevtest "github.com/google/go-sev-guest/testing"
	tdxclient "github.com/google/go-tdx-guest/client"
	tdxtest "github.com/google/go-tdx-guest/testing"
	tdxdata "github.com/google/go-tdx-guest/testing/testdata"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/nitro"
	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/attest/snp"
	"github.com/cloister-cc/cloister/internal/attest/tdx"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// serve starts a configfs-shaped folder answering with answer.
func serve(t *testing.T, provider string, answer func([]byte) ([]byte, []byte, error)) string {
	t.Helper()
	root := t.TempDir()
	producetest.ServeForTest(t, &producetest.TSMFolder{Root: root, Provider: provider, Answer: answer, Errors: func(err error) { t.Log(err) }})
	return root
}

func signer(t *testing.T) *producetest.SNPSigner {
	t.Helper()
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.HostData[0] = 0x42
	return s
}

var binding = bytes.Repeat([]byte{0xB1}, 32)

func TestTSMSNP(t *testing.T) {
	s := signer(t)
	root := serve(t, producetest.ProviderSEV, producetest.SNPAnswer(s, nil))
	p, err := produce.Detect(ctx(t), producetest.GuestPaths(root))
	if err != nil {
		t.Fatal(err)
	}
	if p.Type() != attest.SNP {
		t.Fatalf("detected %s", p.Type())
	}
	ev, err := p.Quote(ctx(t), binding)
	if err != nil {
		t.Fatal(err)
	}
	c, err := snp.Verify(ev.Raw, snp.Options{At: time.Now(), TestRoots: s.Roots()})
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Clone(binding), make([]byte, 32)...)
	if !bytes.Equal(c.ReportData, want) || c.SNP.HostData[0] != 0x42 || !c.TestRoot {
		t.Errorf("claims %+v", c)
	}
	// Every request had an entry of its own, removed afterwards.
	entries, err := os.ReadDir(filepath.Join(root, "report"))
	if err != nil || len(entries) != 0 {
		t.Errorf("entries left: %v %v", entries, err)
	}
	if _, err := p.Quote(ctx(t), make([]byte, 65)); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("65 bytes of report data: %v", err)
	}
}

// A platform that answers with a report over other report data (a
// confused or hostile layer below) is refused by the producer.
func TestProducersRefuseOtherReportData(t *testing.T) {
	s := signer(t)
	other := bytes.Repeat([]byte{0x0E}, 64)
	lying := func([]byte) ([]byte, []byte, error) { return producetest.SNPAnswer(s, nil)(other) }
	tsm, err := produce.OpenTSM(ctx(t), serve(t, producetest.ProviderSEV, lying))
	if err != nil {
		t.Fatal(err)
	}
	quote := producetest.TDXQuote(t)
	_, quoted, err := tdx.ReportData(quote)
	if err != nil {
		t.Fatal(err)
	}
	tdxTSM, err := produce.OpenTSM(ctx(t), serve(t, producetest.ProviderTDX, producetest.QuoteAnswer(quote)))
	if err != nil {
		t.Fatal(err)
	}
	var rd [64]byte
	copy(rd[:], binding)
	sevDev, err := s.FakeDevice(map[[64]byte][]byte{rd: other})
	if err != nil {
		t.Fatal(err)
	}
	tdxDev := tdxDevice(t, rd, quote)
	nsm, err := producetest.NewNSM(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	nsm.Tamper = true
	for name, p := range map[string]produce.Producer{
		"configfs SEV-SNP": tsm,
		"configfs TDX":     tdxTSM,
		"/dev/sev-guest":   &produce.SEVGuest{Path: "fake", Open: func(string) (sevclient.Device, error) { return sevDev, sevDev.Open("") }},
		"/dev/tdx_guest":   &produce.TDXGuest{Path: "fake", Open: func(string) (tdxclient.Device, error) { return tdxDev, tdxDev.Open("") }},
		"Nitro (tampered)": &produce.Nitro{Module: nsm},
	} {
		_, err := p.Quote(ctx(t), binding)
		if !errors.Is(err, produce.ErrReportDataDiffers) {
			t.Errorf("%s: %v, want %v", name, err, produce.ErrReportDataDiffers)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// The canned quote is taken for its own report data.
	if ev, err := tdxTSM.Quote(ctx(t), quoted); err != nil || !bytes.Equal(ev.Raw, quote) || ev.Type != attest.TDX {
		t.Errorf("TDX over the quote's own report data: %v", err)
	}
}

func tdxDevice(t *testing.T, rd [64]byte, quote []byte) *tdxtest.Device {
	t.Helper()
	var report [1024]byte
	copy(report[:], tdxdata.RawReport)
	d, err := tdxtest.TcDevice([]tdxtest.TestCase{{Input: rd, Report: report, Quote: quote}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDevices(t *testing.T) {
	s := signer(t)
	var rd [64]byte
	copy(rd[:], binding)
	dev, err := s.FakeDevice(map[[64]byte][]byte{rd: rd[:]})
	if err != nil {
		t.Fatal(err)
	}
	p := &produce.SEVGuest{Path: "fake", Open: func(string) (sevclient.Device, error) { return dev, dev.Open("") }}
	ev, err := p.Quote(ctx(t), binding)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := snp.Verify(ev.Raw, snp.Options{At: time.Now(), TestRoots: s.Roots()}); err != nil || !bytes.HasPrefix(c.ReportData, binding) {
		t.Errorf("extended report: %+v %v", c, err)
	}

	quote := producetest.TDXQuote(t)
	_, quoted, err := tdx.ReportData(quote)
	if err != nil {
		t.Fatal(err)
	}
	copy(rd[:], quoted)
	tdxDev := tdxDevice(t, rd, quote)
	ev, err = (&produce.TDXGuest{Path: "fake", Open: func(string) (tdxclient.Device, error) { return tdxDev, tdxDev.Open("") }}).Quote(ctx(t), quoted)
	if err != nil || !bytes.Equal(ev.Raw, quote) {
		t.Errorf("TDX device: %v", err)
	}

	if _, err := (&produce.SEVGuest{Path: filepath.Join(t.TempDir(), "sev-guest")}).Quote(ctx(t), binding); err == nil || !strings.Contains(err.Error(), "sev-guest") {
		t.Errorf("missing device: %v", err)
	}
}

func TestNitro(t *testing.T) {
	nsm, err := producetest.NewNSM(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := &produce.Nitro{Module: nsm}
	nonce := []byte("nonce-1")
	ev, err := p.Attest(binding, nonce)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nitro.Verify(ev.Raw, nitro.Options{At: time.Now()}); attest.CheckOf(err) != attest.CheckChain {
		t.Errorf("a test document without its test root: %v", err)
	}
	c, err := nitro.Verify(ev.Raw, nitro.Options{At: time.Now(), TestRoots: []*x509.Certificate{nsm.Root()}})
	if err != nil {
		t.Fatal(err)
	}
	if !c.TestRoot || !bytes.Equal(c.ReportData, binding) || !bytes.Equal(c.Nonce, nonce) || len(c.Nitro.PCRs[0]) != 48 {
		t.Errorf("claims %+v", c)
	}
	// A document made for another nonce (a replay) is refused.
	nsm.Replay = ev.Raw
	if _, err := p.Attest(binding, []byte("nonce-2")); err == nil || !strings.Contains(err.Error(), "another request") {
		t.Errorf("replayed document: %v", err)
	}
	if _, err := p.Attest(make([]byte, 513), nil); err == nil {
		t.Error("513 bytes of user data taken")
	}
}

func TestDetectNames(t *testing.T) {
	dir := t.TempDir()
	_, err := produce.Detect(ctx(t), produce.Paths{TSM: dir, SEVGuest: filepath.Join(dir, "sev"), TDXGuest: filepath.Join(dir, "tdx"), NSM: filepath.Join(dir, "nsm")})
	if !errors.Is(err, produce.ErrNoTEE) {
		t.Fatalf("%v", err)
	}
	for _, want := range []string{"report", "sev", "tdx", "nsm"} {
		if !strings.Contains(err.Error(), filepath.Join(dir, want)) {
			t.Errorf("%v does not name %s", err, want)
		}
	}
}

// The sealing key is the firmware's, derived from the chip's VCEK with the
// launch measurement and guest policy mixed in (go-sev-guest's fake device
// answers only that request).
func TestSealingKey(t *testing.T) {
	want := bytes.Repeat([]byte{0x5E}, 32)
	req := &labi.SnpDerivedKeyReqABI{RootKeySelect: 0, GuestFieldSelect: 1<<3 | 1<<0}
	dev := &sevtest.Device{Keys: map[string][]byte{sevtest.DerivedKeyRequestToString(req): want}}
	p := &produce.SEVGuest{Path: "fake", Open: func(string) (sevclient.Device, error) { return dev, dev.Open("") }}
	got, err := p.SealingKey()
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("sealing key %x, %v", got, err)
	}
	if _, err := (&produce.SEVGuest{Path: filepath.Join(t.TempDir(), "sev-guest")}).SealingKey(); err == nil {
		t.Error("a sealing key without a device")
	}
}
