package snp

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-sev-guest/verify/testdata"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
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
	if c.NotBefore.After(vectorTime) || c.NotAfter.Before(vectorTime) || c.NotBefore.IsZero() {
		t.Errorf("validity %s..%s does not hold the vector's time", c.NotBefore, c.NotAfter)
	}
	t.Logf("measurement %s policy %#x debug %v reported TCB %#x %+v", c.SNP.Measurement, c.SNP.GuestPolicy, c.Debug, c.SNP.ReportedTCB, c.SNP.TCB)
	// 0x4405000000000002: bootloader 2, TEE 0, SNP 5, microcode 0x44.
	if want := (attest.SNPTCB{Bootloader: 2, SNP: 5, Microcode: 0x44}); c.SNP.ReportedTCB != 0x4405000000000002 || c.SNP.TCB != want {
		t.Errorf("TCB parts %+v, want %+v", c.SNP.TCB, want)
	}
	allowDebug := &attest.Policy{AllowDebug: true, Identities: []attest.Identity{{Type: attest.SNP, MinTCB: &attest.SNPTCB{SNP: 6}}}}
	if err := allowDebug.Check(c); attest.CheckOf(err) != attest.CheckIdentity || !strings.Contains(err.Error(), "SNP firmware SVN 5 is below the minimum 6") {
		t.Errorf("minimum SNP firmware SVN 6: %v", err)
	}
	allowDebug.Identities[0].MinTCB.SNP = 5
	if err := allowDebug.Check(c); err != nil {
		t.Errorf("minimum SNP firmware SVN 5: %v", err)
	}
	// Its guest policy allows debugging: the default policy refuses it.
	if err := (&attest.Policy{}).Check(c); c.Debug && attest.CheckOf(err) != attest.CheckDebug {
		t.Errorf("default policy on a debug-allowing report: %v", err)
	}
}

func TestRejections(t *testing.T) {
	raw := testdata.AttestationBytes
	// Verified once first, so every refusal below holds with the VCEK's
	// chain remembered as verified.
	if _, err := Verify(raw, Options{At: vectorTime, VCEK: testdata.VcekBytes}); err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte { c := bytes.Clone(raw); c[i] ^= 1; return c }
	foreign, unknownLine := vcekFrom(t, "SEV-Milan"), vcekFrom(t, "SEV-Mars")
	for _, tc := range []struct {
		name   string
		raw    []byte
		opts   Options
		check  attest.Check
		reason string
	}{
		{"flipped byte in the measurement", flip(0x90), Options{At: vectorTime, VCEK: testdata.VcekBytes}, attest.CheckSignature, ""},
		{"flipped byte in the signature", flip(0x2A0 + 5), Options{At: vectorTime, VCEK: testdata.VcekBytes}, attest.CheckSignature, ""},
		{"VCEK not yet valid", raw, Options{At: time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC), VCEK: testdata.VcekBytes}, attest.CheckValidity, ""},
		{"VCEK of a foreign CA named like AMD's", raw, Options{At: vectorTime, VCEK: foreign}, attest.CheckChain, "unknown authority"},
		{"VCEK of an unknown product line", raw, Options{At: vectorTime, VCEK: unknownLine}, attest.CheckChain, "no AMD root for product line \"Mars\""},
		{"VCEK expired", raw, Options{At: time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC), VCEK: testdata.VcekBytes}, attest.CheckValidity, ""},
		{"no VCEK", raw, Options{At: vectorTime}, attest.CheckCollateral, "--collateral"},
		{"trailing bytes that are no certificate table", append(bytes.Clone(raw), 0), Options{At: vectorTime, VCEK: testdata.VcekBytes}, attest.CheckFormat, "the 1 bytes after the report are not a certificate table"},
		{"truncated", raw[:100], Options{At: vectorTime, VCEK: testdata.VcekBytes}, attest.CheckFormat, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.raw, tc.opts)
			if attest.CheckOf(err) != tc.check || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("got %v, want %s (%q)", err, tc.check, tc.reason)
			} else {
				t.Log(err)
			}
		})
	}
}

// A report as a confidential VM's kernel returns it (report, then the
// platform's certificate table) verifies by the table's VCEK or VLEK, but
// only against roots the verifier trusts: test roots are taken only when
// given, and the claims say so.
func TestCertificateTableAndTestRoots(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		product string
		vlek    bool
	}{{"Milan-B1", false}, {"Milan-B1", true}, {"Genoa-B1", false}, {"Genoa-B1", true}} {
		vlek := tc.vlek
		s, err := producetest.NewSNPSignerFor(tc.product, now)
		if err != nil {
			t.Fatal(err)
		}
		s.VLEK = vlek
		s.HostData[0], s.Measurement[0] = 0xAB, 0xCD
		report, err := s.Report([]byte("key binding"))
		if err != nil {
			t.Fatal(err)
		}
		table, err := s.CertTable()
		if err != nil {
			t.Fatal(err)
		}
		ev := append(report, table...)
		c, err := Verify(ev, Options{At: now, TestRoots: s.Roots()})
		if err != nil {
			t.Fatalf("VLEK %v: %v", vlek, err)
		}
		if !c.TestRoot || c.SNP.HostData[0] != 0xAB || c.SNP.Measurement[0] != 0xCD || !bytes.HasPrefix(c.ReportData, []byte("key binding")) || c.Debug {
			t.Errorf("%s, VLEK %v: claims %+v %+v", tc.product, vlek, c, c.SNP)
		}
		t.Logf("%s, VLEK %v: verified under the test roots", tc.product, vlek)
		if _, err := Verify(ev, Options{At: now}); attest.CheckOf(err) != attest.CheckChain {
			t.Errorf("VLEK %v: without test roots: %v, want a chain rejection", vlek, err)
		}
		if _, err := Verify(report, Options{At: now, TestRoots: s.Roots()}); attest.CheckOf(err) != attest.CheckCollateral {
			t.Errorf("VLEK %v: no table, no VCEK: %v", vlek, err)
		}
		tampered := bytes.Clone(ev)
		tampered[0xC0] ^= 1 // host data
		if _, err := Verify(tampered, Options{At: now, TestRoots: s.Roots()}); attest.CheckOf(err) != attest.CheckSignature {
			t.Errorf("VLEK %v: tampered host data: %v", vlek, err)
		}
	}
	// The real report keeps verifying by AMD's roots when test roots are given too.
	s, err := producetest.NewSNPSigner(now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Verify(testdata.AttestationBytes, Options{At: vectorTime, VCEK: testdata.VcekBytes, TestRoots: s.Roots()})
	if err != nil || c.TestRoot {
		t.Errorf("real report beside test roots: %+v, %v", c, err)
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(testdata.AttestationBytes)
	// A report with the platform's certificate table after it.
	if s, err := producetest.NewSNPSigner(vectorTime); err == nil {
		report, _ := s.Report([]byte("seed"))
		table, _ := s.CertTable()
		f.Add(append(report, table...))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		attesttest.CountExec()
		_, err := Verify(raw, Options{At: vectorTime, VCEK: testdata.VcekBytes})
		if err != nil && attest.CheckOf(err) == "" {
			t.Fatalf("unnamed rejection: %v", err)
		}
	})
}

// vcekFrom copies the real VCEK (subject, SEV-SNP extensions, key type)
// into a certificate signed with RSASSA-PSS SHA-384 by a foreign CA that
// carries the real issuer's name, but the given common name: the only
// difference from AMD's is the key.
func vcekFrom(t *testing.T, issuerCN string) []byte {
	t.Helper()
	real, err := x509.ParseCertificate(testdata.VcekBytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	issuer := real.Issuer
	issuer.CommonName, issuer.Names = issuerCN, nil
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: issuer, IsCA: true, BasicConstraintsValid: true,
		SignatureAlgorithm: x509.SHA384WithRSAPSS, NotBefore: time.Unix(0, 0), NotAfter: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), KeyUsage: x509.KeyUsageCertSign}
	leafKey, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	subject := real.Subject
	subject.Names = nil
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: subject, SignatureAlgorithm: x509.SHA384WithRSAPSS,
		NotBefore: real.NotBefore, NotAfter: real.NotAfter}
	for _, e := range real.Extensions {
		if strings.HasPrefix(e.Id.String(), "1.3.6.1.4.1.3704.") { // AMD's SEV-SNP extensions
			leaf.ExtraExtensions = append(leaf.ExtraExtensions, e)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// AMD's roots for every product line the verifier names are in
// go-sev-guest, for VCEKs and VLEKs alike: a real Genoa or Turin report,
// or a VLEK's, finds its ARK and ASK (or ASVK).
func TestAMDRootsForEveryLine(t *testing.T) {
	for _, line := range []string{"Milan", "Genoa", "Turin"} {
		c, err := rootsFor(line, nil)
		if err != nil || len(c) == 0 {
			t.Fatalf("%s: %v %+v", line, err, c)
		}
		var ask, asvk bool
		for _, cand := range c {
			pc := cand.roots.ProductCerts
			if cand.test || pc.Ark == nil || pc.Ark.Subject.CommonName != "ARK-"+line {
				t.Errorf("%s: a candidate that is not AMD's ARK: %+v", line, cand)
				continue
			}
			if pc.Ask != nil && pc.Ask.Subject.CommonName == "SEV-"+line && pc.Ask.CheckSignatureFrom(pc.Ark) == nil {
				ask = true
			}
			if pc.Asvk != nil && pc.Asvk.Subject.CommonName == "SEV-VLEK-"+line && pc.Asvk.CheckSignatureFrom(pc.Ark) == nil {
				asvk = true
			}
		}
		if !ask || !asvk {
			t.Errorf("%s: an ASK under its ARK %v, an ASVK %v", line, ask, asvk)
		}
	}
}
