// Package attesttest gives tests real attestation evidence: SGX and TDX
// quotes from real hardware with their Intel collateral, published as test
// data by Go modules that hack/testvectors pins (their hashes in its
// go.sum), which the go command downloads into the module cache at test
// time; and real evidence no module publishes (SEV-SNP reports v5 from
// Genoa and Turin, a VLEK, a TDX quote v5, Nitro Enclaves documents),
// copied with its provenance into the verifiers' testdata/ (Real,
// RealEvidence), so a clone runs every real-evidence test on its own. A
// test whose module cannot be downloaded skips and says why at the end of
// make test.
package attesttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

// oasis is the module whose common/sgx/pcs/testdata holds the SGX and TDX
// evidence; its version is hack/testvectors' requirement.
const oasis = "github.com/oasisprotocol/oasis-core/go"

// vectors maps each file of the layout tests read (kind/name) to the
// module file it comes from.
var vectors = map[string]struct{ module, path string }{
	"sgx-dcap/quote_v3_ecdsa_p256_pck_chain.bin":        {oasis, "common/sgx/pcs/testdata/quote_v3_ecdsa_p256_pck_chain.bin"},
	"sgx-dcap/tcb_info_v3_fmspc_00606A000000.json":      {oasis, "common/sgx/pcs/testdata/tcb_info_v3_fmspc_00606A000000.json"},
	"sgx-dcap/tcb_info_v3_fmspc_00606A000000_certs.pem": {oasis, "common/sgx/pcs/testdata/tcb_info_v3_fmspc_00606A000000_certs.pem"},
	"sgx-dcap/qe_identity_v2.json":                      {oasis, "common/sgx/pcs/testdata/qe_identity_v2.json"},
	"tdx/quote_v4_tdx_ecdsa_p256.bin":                   {oasis, "common/sgx/pcs/testdata/quote_v4_tdx_ecdsa_p256.bin"},
	"tdx/tcb_info_v3_tdx_fmspc_C0806F000000.json":       {oasis, "common/sgx/pcs/testdata/tcb_info_v3_tdx_fmspc_C0806F000000.json"},
	"tdx/qe_identity_v2_tdx2.json":                      {oasis, "common/sgx/pcs/testdata/qe_identity_v2_tdx2.json"},
	// The TCB signing chain is Intel's one chain, as for SGX.
	"tdx/tcb_signing_chain_certs.pem": {oasis, "common/sgx/pcs/testdata/tcb_info_v3_fmspc_00606A000000_certs.pem"},
	// A SIGSTRUCT made by Fortanix's signing tool, and the key it is
	// signed with (oasis-core checks its own signer reproduces it).
	"sgx-sigstruct/sig1.sigstruct.bin": {oasis, "common/sgx/testdata/sig1.sigstruct.bin"},
	"sgx-sigstruct/sig1.key.pem":       {oasis, "common/sgx/testdata/sig1.key.pem"},
}

var (
	modulesOnce sync.Once
	moduleDirs  map[string]string
	modulesErr  error
)

// moduleDir downloads (once per test binary) the pinned modules and
// returns where the module cache holds module.
func moduleDir(root, module string) (string, error) {
	modulesOnce.Do(func() {
		cmd := exec.Command("go", "mod", "download", "-json", oasis)
		cmd.Dir = filepath.Join(root, "hack", "testvectors")
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
		out, err := cmd.Output()
		var info struct{ Path, Dir, Error string }
		if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
			err = errors.New(info.Error)
		} else if err == nil {
			err = jerr
		}
		if err != nil {
			modulesErr = fmt.Errorf("go mod download %s (pinned in hack/testvectors): %w", oasis, err)
			return
		}
		moduleDirs = map[string]string{info.Path: info.Dir}
	})
	if modulesErr != nil {
		return "", modulesErr
	}
	return moduleDirs[module], nil
}

// root is the module root above the test's directory.
func root(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && filepath.Base(filepath.Dir(dir)) != "hack" {
			if _, err := os.Stat(filepath.Join(dir, "hack", "testvectors", "go.mod")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("attesttest: no Cloister checkout (hack/testvectors/go.mod) above the test's directory")
		}
		dir = parent
	}
}

// source is where the file rel of the layout is, or why it is absent.
func source(tb testing.TB, rel string) (string, error) {
	tb.Helper()
	v, ok := vectors[rel]
	if !ok {
		tb.Fatalf("attesttest: no test vector %s", rel)
	}
	dir, err := moduleDir(root(tb), v.module)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, v.path), nil
}

// Read returns the test vector rel (e.g. "sgx-dcap/qe_identity_v2.json"),
// skipping the test, and saying so at the end of make test, when it cannot
// be had.
func Read(tb testing.TB, rel string) []byte {
	tb.Helper()
	p, err := source(tb, rel)
	if err != nil {
		testskip.Skipf(tb, "%v", err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		tb.Fatalf("test vector %s: %v", rel, err)
	}
	return b
}

// Dir lays out the test vectors of kind ("sgx-dcap", "tdx") in a
// folder of the test's own, as the CLI's --collateral and --evidence flags
// read them, and returns it.
func Dir(tb testing.TB, kind string) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), kind)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	for rel := range vectors {
		if filepath.Dir(rel) != kind {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(rel)), Read(tb, rel), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}
