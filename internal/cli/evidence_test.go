package cli

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	snptestdata "github.com/google/go-sev-guest/verify/testdata"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/collateral/collateraltest"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/attest/verify"
)

// sgxQuote returns the real quote's path and its collateral's folder.
func sgxQuote(t *testing.T) (string, string) {
	t.Helper()
	dir := attesttest.Dir(t, "sgx-dcap")
	return filepath.Join(dir, "quote_v3_ecdsa_p256_pck_chain.bin"), dir
}

func exitCode(err error) int {
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestEvidenceVerifySGX(t *testing.T) {
	quote, sgxVectors := sgxQuote(t)
	base := []string{"evidence", "verify", "--type", "sgx", "--evidence", quote, "--collateral", sgxVectors, "--at", "1671497404"}

	out, _, err := run(t, base...)
	if exitCode(err) != 1 || !strings.HasPrefix(out, `rejected: tcb-status: TCB status "SWHardeningNeeded" is not accepted`) ||
		!strings.Contains(out, "mrenclave:    68823bc6") {
		t.Errorf("default policy: exit %d\n%s", exitCode(err), out)
	}

	out, _, err = run(t, append(base, "--accept-tcb", "UpToDate,SWHardeningNeeded", "-o", "json")...)
	var v struct {
		Accepted bool
		Claims   attest.Claims
	}
	if exitCode(err) != 0 || json.Unmarshal([]byte(out), &v) != nil || !v.Accepted || v.Claims.SGX.MRENCLAVE.String()[:8] != "68823bc6" {
		t.Errorf("accepting policy: exit %d\n%s", exitCode(err), out)
	}

	// Base64 evidence is recognised; a later time rejects by validity.
	raw, _ := os.ReadFile(quote)
	b64 := filepath.Join(t.TempDir(), "quote.b64")
	if err := os.WriteFile(b64, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "evidence", "verify", "--type", "sgx", "--evidence", b64, "--collateral", sgxVectors, "--at", "2031-01-01T00:00:00Z")
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: validity: ") || strings.Count(out, "rejected:") != 1 {
		t.Errorf("base64 evidence at 2031: exit %d\n%s", exitCode(err), out)
	}

	out, _, err = run(t, "evidence", "verify", "--type", "sgx", "--evidence", quote, "--at", "1671497404")
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: collateral: TCB info, QE identity and their signing chain are required (--collateral DIR)") ||
		!strings.Contains(out, "mrenclave:    68823bc6") {
		t.Errorf("no collateral: exit %d\n%s", exitCode(err), out)
	}
}

func TestEvidenceVerifySim(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	at := time.Now()
	raw, err := sim.Generate(key, attest.Claims{TCBStatus: attest.TCBUpToDate, Nonce: attest.Bytes{0xc0, 0xff, 0xee},
		SGX: &attest.SGXIdentity{MRENCLAVE: bytes.Repeat([]byte{1}, 32)}}, at, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sim.json")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "evidence", "verify", "--type", "sim", "--evidence", file)
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: simulation: ") || !strings.Contains(out, "insecure:") {
		t.Errorf("sim under the default policy: exit %d\n%s", exitCode(err), out)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("allowSimulation: true\nidentities:\n- type: sgx\n  mrenclave: \""+strings.Repeat("01", 32)+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "evidence", "verify", "--type", "sim", "--evidence", file, "--policy", policy)
	if exitCode(err) != 0 || !strings.HasPrefix(out, "accepted: sim evidence") {
		t.Errorf("sim allowed by the policy file: exit %d %v\n%s", exitCode(err), err, out)
	}
	out, _, err = run(t, "evidence", "verify", "--type", "sim", "--evidence", file, "--policy", policy, "--nonce", "c0ffee")
	if exitCode(err) != 0 {
		t.Errorf("the nonce it carries: exit %d %v\n%s", exitCode(err), err, out)
	}
	out, _, err = run(t, "evidence", "verify", "--type", "sim", "--evidence", file, "--policy", policy, "--nonce", "c0fffe")
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: nonce: the evidence's nonce is c0ffee, want c0fffe") {
		t.Errorf("another nonce: exit %d\n%s", exitCode(err), out)
	}
}

func TestEvidenceVerifyBadInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "e")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	badPolicy := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(badPolicy, []byte("allowDebugging: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	shortMR := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(shortMR, []byte("identities:\n- type: sgx\n  mrenclave: 68823bc6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--type", "sev", "--evidence", file}, `--type: type: unknown evidence type "sev"`},
		{[]string{"--evidence", file}, "--type and --evidence are required"},
		{[]string{"--type", "sgx", "--evidence", file, "--at", "yesterday"}, `invalid --at "yesterday"`},
		{[]string{"--type", "sgx", "--evidence", file, "-o", "yaml"}, `invalid --output "yaml"`},
		{[]string{"--type", "sgx", "--evidence", file, "--nonce", "xyz"}, `invalid --nonce "xyz": give the nonce in hex`},
		{[]string{"--type", "sgx", "--evidence", file, "--policy", badPolicy}, `unknown field "allowDebugging"`},
		{[]string{"--type", "sgx", "--evidence", file, "--policy", shortMR}, "identities[0]: mrenclave has 4 bytes, a sgx mrenclave has 32 (64 hex digits)"},
		{[]string{"--type", "sgx", "--evidence", file, "--accept-tcb", "UpToDate,SWHardening"}, `--accept-tcb[1]: unknown TCB status "SWHardening"`},
		{[]string{"--type", "sgx", "--evidence", filepath.Join(t.TempDir(), "none")}, "--evidence: open"},
	} {
		_, _, err := run(t, append([]string{"evidence", "verify"}, tc.args...)...)
		if exitCode(err) != -1 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// Garbage evidence is a verdict (format), not a usage error.
	out, _, err := run(t, "evidence", "verify", "--type", "sgx", "--evidence", file, "--collateral", t.TempDir())
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: ") {
		t.Errorf("garbage: exit %d\n%s", exitCode(err), out)
	}
}

func TestEvidenceVerifyNitro(t *testing.T) {
	doc := filepath.Join(attesttest.Real(t, "nitro/evervault-beta"), "valid-attestation-doc-bytes")
	out, _, err := run(t, "evidence", "verify", "--type", "nitro", "--evidence", doc, "--at", "2022-10-13T08:58:02Z")
	if exitCode(err) != 0 || !strings.HasPrefix(out, "accepted: nitro evidence") || !strings.Contains(out, "pcr0:         f4d48b81") {
		t.Errorf("exit %d %v\n%s", exitCode(err), err, out)
	}
	out, _, err = run(t, "evidence", "verify", "--type", "nitro", "--evidence", doc)
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: validity: ") {
		t.Errorf("now, long after the leaf expired: exit %d\n%s", exitCode(err), out)
	}
}

func TestEvidenceVerifyTDX(t *testing.T) {
	dir := attesttest.Dir(t, "tdx")
	out, _, err := run(t, "evidence", "verify", "--type", "tdx", "--evidence", filepath.Join(dir, "quote_v4_tdx_ecdsa_p256.bin"),
		"--collateral", dir, "--at", "1725263032")
	if exitCode(err) != 0 || !strings.HasPrefix(out, "accepted: tdx evidence") || !strings.Contains(out, "mrtd:         91eb2b44") {
		t.Errorf("exit %d %v\n%s", exitCode(err), err, out)
	}
}

// go-sev-guest's real Milan report, whose guest policy allows debugging:
// refused under the default policy with its claims shown, accepted with
// --allow-debug; a VCEK is needed.
func TestEvidenceVerifySNP(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report.bin")
	if err := os.WriteFile(report, snptestdata.AttestationBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "milan_vcek.der"), snptestdata.VcekBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"evidence", "verify", "--type", "snp", "--evidence", report, "--collateral", dir, "--at", "2023-01-01T00:00:00Z"}
	out, _, err := run(t, args...)
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: debug: ") || !strings.Contains(out, "measurement:  b07af962") {
		t.Errorf("default policy: exit %d %v\n%s", exitCode(err), err, out)
	}
	out, _, err = run(t, append(args, "--allow-debug")...)
	if exitCode(err) != 0 || !strings.HasPrefix(out, "accepted: snp evidence") || !strings.Contains(out, "(bootloader 2, tee 0, snp 5, microcode 68)") {
		t.Errorf("--allow-debug: exit %d %v\n%s", exitCode(err), err, out)
	}
	out, _, err = run(t, "evidence", "verify", "--type", "snp", "--evidence", report, "--at", "2023-01-01T00:00:00Z", "--allow-debug")
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: collateral: ") {
		t.Errorf("no VCEK: exit %d %v\n%s", exitCode(err), err, out)
	}
}

// With --pcs and the key, evidence verify reaches the verdict it reaches
// with the same collateral in a folder, on real SGX and TDX quotes, from a
// local PCS serving real Intel-signed collateral and CRLs at Intel's paths
// and headers; the PCS saw the key on every request. The key shows nowhere
// in the output.
func TestEvidenceVerifyFromPCS(t *testing.T) {
	pcs := collateraltest.RealPCS(t)
	const key = "00112233445566778899aabbccddeeff"
	pcs.Key = key
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "dcap-key")
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("dcap-key", []byte(key+"\n"))
	sgxQuote, tdxQuote := collateraltest.RealQuotes(t)
	// The same collateral as the PCS serves, in folders.
	folder := func(tee, fmspc string, quote []byte) (string, string) {
		in := pcs.Intel(tee)
		write(tee+"/tcb_info.json", in.TCBInfo[fmspc])
		write(tee+"/qe_identity.json", in.QEIdentity)
		write(tee+"/tcb_certs.pem", in.Chain)
		write(tee+"/pck_crl.der", pcs.CRL("platform"))
		write(tee+"/root_crl.der", pcs.CRL("root"))
		return write(tee+".quote", quote), filepath.Join(dir, tee)
	}
	for _, tc := range []struct {
		tee, fmspc string
		quote      collateraltest.RealQuote
		verdict    string
	}{
		{"sgx", "00606a000000", sgxQuote, `rejected: tcb-status: TCB status "SWHardeningNeeded" is not accepted`},
		{"tdx", "50806f000000", tdxQuote, "rejected: tcb-status: the platform's TCB (PCESVN 11) is below every TCB level of FMSPC 50806f000000"},
	} {
		t.Run(tc.tee, func(t *testing.T) {
			quote, col := folder(tc.tee, tc.fmspc, tc.quote.Raw)
			at := tc.quote.At.Format(time.RFC3339)
			fromFolder, _, err := run(t, "evidence", "verify", "--type", tc.tee, "--evidence", quote, "--collateral", col, "--at", at)
			if exitCode(err) != 1 || !strings.HasPrefix(fromFolder, tc.verdict) {
				t.Fatalf("from the folder: exit %d %v\n%s", exitCode(err), err, fromFolder)
			}
			before := len(pcs.Keys())
			fromPCS, stderr, err := run(t, "evidence", "verify", "--type", tc.tee, "--evidence", quote, "--pcs", pcs.URL, "--dcap-api-file", keyFile, "--at", at)
			if exitCode(err) != 1 || fromPCS != fromFolder {
				t.Fatalf("from the PCS: exit %d %v\n%s\nwant\n%s", exitCode(err), err, fromPCS, fromFolder)
			}
			keys := pcs.Keys()[before:]
			if len(keys) != 4 {
				t.Errorf("%d requests, want 4 (TCB info, QE identity, two CRLs)", len(keys))
			}
			for _, k := range keys {
				if k != key {
					t.Errorf("a request carried key %q", k)
				}
			}
			if strings.Contains(fromPCS+stderr, key) {
				t.Error("the key shows in the output")
			}
			// Accepted alike when its TCB status is.
			accept := []string{"--accept-tcb", "UpToDate,SWHardeningNeeded"}
			fromFolder, _, errFolder := run(t, append([]string{"evidence", "verify", "--type", tc.tee, "--evidence", quote, "--collateral", col, "--at", at}, accept...)...)
			fromPCS, _, errPCS := run(t, append([]string{"evidence", "verify", "--type", tc.tee, "--evidence", quote, "--pcs", pcs.URL, "--dcap-api-file", keyFile, "--at", at}, accept...)...)
			if exitCode(errFolder) != exitCode(errPCS) || fromFolder != fromPCS {
				t.Errorf("accepting SWHardeningNeeded: folder exit %d, PCS exit %d\n%s\n%s", exitCode(errFolder), exitCode(errPCS), fromFolder, fromPCS)
			}
			if tc.tee == "sgx" && !strings.HasPrefix(fromPCS, "accepted: sgx evidence") {
				t.Errorf("accepting SWHardeningNeeded:\n%s", fromPCS)
			}
		})
	}
	// Without the key the PCS refuses, and the error says so without it.
	quote, _ := folder("sgx", "00606a000000", sgxQuote.Raw)
	out, _, err := run(t, "evidence", "verify", "--type", "sgx", "--evidence", quote, "--pcs", pcs.URL, "--at", "1671497404")
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: collateral: ") || !strings.Contains(out, "401 Unauthorized: the Intel DCAP API key is missing or wrong") {
		t.Errorf("no key: exit %d\n%s", exitCode(err), out)
	}
	for _, args := range [][]string{
		{"--pcs", pcs.URL, "--collateral", dir},
		{"--dcap-api-file", keyFile},
		{"--pcs", "pcs.example"},
		{"--pcs", pcs.URL, "--dcap-api-file", write("short-key", []byte("abc"))},
	} {
		_, _, err := run(t, append([]string{"evidence", "verify", "--type", "sgx", "--evidence", quote}, args...)...)
		if exitCode(err) != -1 {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// With --kds, an SEV-SNP report without its certificate table verifies
// with the VCEK and CRL fetched from a local KDS (under go-sev-guest's
// test roots); a CRL that revokes its ASK refuses it.
func TestEvidenceVerifyFromKDS(t *testing.T) {
	now := time.Now()
	signer, err := producetest.NewSNPSigner(now)
	if err != nil {
		t.Fatal(err)
	}
	report, err := signer.Report([]byte("from kds"))
	if err != nil {
		t.Fatal(err)
	}
	crl, err := signer.CRL(now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kds := collateraltest.NewKDS(t, map[string][]byte{collateraltest.VCEKPath(t, "Milan", report): signer.VCEK(), "/vcek/v1/Milan/crl": crl})
	dir := t.TempDir()
	reportFile, roots := filepath.Join(dir, "report.bin"), filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(reportFile, report, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(roots, signer.RootsPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"evidence", "verify", "--type", "snp", "--evidence", reportFile, "--insecure-test-roots", roots}
	out, _, err := run(t, args...)
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: collateral: ") {
		t.Errorf("no VCEK, no KDS: exit %d\n%s", exitCode(err), out)
	}
	out, _, err = run(t, append(args, "--kds", kds.URL)...)
	if exitCode(err) != 0 || !strings.HasPrefix(out, "accepted: snp evidence") {
		t.Errorf("from the KDS: exit %d %v\n%s", exitCode(err), err, out)
	}
	revoking, err := signer.CRL(now.Add(-time.Hour), now.Add(time.Hour), signer.ASK().SerialNumber)
	if err != nil {
		t.Fatal(err)
	}
	kds.Set("/vcek/v1/Milan/crl", revoking)
	out, _, err = run(t, append(args, "--kds", kds.URL)...)
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: revoked: ") {
		t.Errorf("its ASK revoked: exit %d %v\n%s", exitCode(err), err, out)
	}
}

// A quote of the fake AESM's quoting enclave is accepted only with its
// test root, and says it is insecure; pinned to its MRENCLAVE and report
// data by a policy, another enclave is refused by name.
func TestEvidenceVerifySGXTestRoot(t *testing.T) {
	s, err := producetest.NewSGXSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	roots, err := s.WriteCollateral(filepath.Join(dir, "collateral"))
	if err != nil {
		t.Fatal(err)
	}
	body := producetest.EnclaveBody(0xe1, 0x51)
	copy(body[320:], []byte{0xab, 0xcd})
	q, err := s.Quote(body)
	if err != nil {
		t.Fatal(err)
	}
	quote := writeFile(t, dir, "quote.bin", string(q))
	policy := writeFile(t, dir, "policy.yaml", "reportData: abcd\nidentities: [{type: sgx, mrenclave: "+strings.Repeat("e1", 32)+"}]\n")
	args := []string{"evidence", "verify", "--type", "sgx", "--evidence", quote, "--collateral", filepath.Join(dir, "collateral"), "--policy", policy}
	out, _, err := run(t, args...)
	if exitCode(err) != 1 || !strings.HasPrefix(out, "rejected: chain: ") {
		t.Errorf("without the test root: exit %d %v\n%s", exitCode(err), err, out)
	}
	out, stderr, err := run(t, append(args, "--"+verify.TestRootsFlag, roots)...)
	if exitCode(err) != 0 || !strings.HasPrefix(out, "accepted: sgx evidence") || !strings.Contains(out, "testRoot") || !strings.Contains(stderr, "INSECURE") {
		t.Errorf("with the test root: exit %d %v\n%s%s", exitCode(err), err, out, stderr)
	}
	other := writeFile(t, dir, "other.yaml", "identities: [{type: sgx, mrenclave: "+strings.Repeat("e2", 32)+"}]\n")
	out, _, err = run(t, "evidence", "verify", "--type", "sgx", "--evidence", quote, "--collateral", filepath.Join(dir, "collateral"), "--policy", other, "--"+verify.TestRootsFlag, roots)
	if exitCode(err) != 1 || !strings.Contains(out, "MRENCLAVE is e1e1") {
		t.Errorf("another enclave: exit %d %v\n%s", exitCode(err), err, out)
	}
}
