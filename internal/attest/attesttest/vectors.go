// Package attesttest reads the team's real attestation evidence for tests
// from ../shared/testvectors beside the checkout. The files are never
// copied into the project; without the folder (as for users outside the
// team) a test skips and says why.
package attesttest

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir is the test vectors folder, found from the module root.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("attesttest: no go.mod above the test's directory")
		}
		dir = parent
	}
	v := filepath.Join(dir, "..", "shared", "testvectors")
	if _, err := os.Stat(v); err != nil {
		tb.Skipf("real attestation evidence is absent (%v): it lives in ../shared/testvectors beside the checkout", err)
	}
	return v
}

// Read returns the file at rel (e.g. "sgx-dcap/qe_identity_v2.json")
// inside the test vectors, skipping the test when it is absent.
func Read(tb testing.TB, rel string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(tb), rel))
	if err != nil {
		tb.Skipf("test vector %s: %v", rel, err)
	}
	return b
}
