package verify

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"os"
	"path/filepath"
	"testing"
	"time"

	sevtestdata "github.com/google/go-sev-guest/verify/testdata"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
	"github.com/cloister-cc/cloister/internal/attest/nitro"
	"github.com/cloister-cc/cloister/internal/attest/sgx"
	"github.com/cloister-cc/cloister/internal/attest/snp"
	"github.com/cloister-cc/cloister/internal/attest/tdx"
)

// Verification at the speed of its signatures: each real vector is
// verified with its chains and collateral already checked once (as a
// verifier sees a platform's second quote), alternating with the
// signatures it cannot avoid (its floor). verify-µs/op and floor-µs/op
// are theirs; floor-% is the floor's share of a verification, 100 being
// all signature.
//
//	go test -run '^$' -bench . -p 1 ./internal/attest/verify/

func BenchmarkVerify(b *testing.B) {
	p256, p384 := ecdsaVerify(b, elliptic.P256(), sha256.New), ecdsaVerify(b, elliptic.P384(), sha512.New384)
	for _, tc := range []struct {
		name   string
		verify func(testing.TB) func() error
		floor  func() bool
		n      int // floor signatures per verification
	}{
		// The quote (by the attestation key) and the QE report (by the PCK).
		{"sgx", sgxVector, p256, 2},
		{"tdx", tdxVector, p256, 2},
		// The report (by the VCEK); the VCEK's RSA chain is the chip's.
		{"snp", snpVector, p384, 1},
		// The document (by its enclave's key); the CA bundle is AWS's.
		{"nitro", nitroVector, p384, 1},
		// The real evidence of the verifiers' testdata, with its folder as
		// collateral (and its CRLs).
		{"snp-genoa-v5", realVector("snp/oak-genoa-v5", "report.bin", "2025-09-01T00:00:00Z"), p384, 1},
		{"snp-turin-v5", realVector("snp/oak-turin-v5", "report.bin", "2025-09-01T00:00:00Z"), p384, 1},
		{"snp-vlek-v5", realVector("snp/verdifax-vlek-v5", "report.bin", "2026-06-01T00:00:00Z"), p384, 1},
		{"tdx-v4-padded", realVector("tdx/dcap-qvl-v4", "quote-5006-bytes.bin", "2025-06-20T00:00:00Z"), p256, 2},
	} {
		b.Run(tc.name, func(b *testing.B) {
			verify := tc.verify(b)
			if err := verify(); err != nil { // checks chains and collateral once
				b.Fatal(err)
			}
			// A verification and its floor alternate, so both are measured
			// under the same load; ns/op is their sum.
			var spent, floor time.Duration
			for b.Loop() {
				start := time.Now()
				if err := verify(); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				for range tc.n {
					if !tc.floor() {
						b.Fatal("a floor signature does not verify")
					}
				}
				spent, floor = spent+mid.Sub(start), floor+time.Since(mid)
			}
			b.ReportMetric(float64(spent.Microseconds())/float64(b.N), "verify-µs/op")
			b.ReportMetric(float64(floor.Microseconds())/float64(b.N), "floor-µs/op")
			b.ReportMetric(100*float64(floor)/float64(spent), "floor-%")
		})
	}
}

// BenchmarkSignature is the raw cost of each kind of signature the
// verifiers check: P-256 (SGX, TDX quotes and Intel collateral), P-384
// (SEV-SNP reports, Nitro documents), RSA-4096 PSS (AMD's VCEK chain).
func BenchmarkSignature(b *testing.B) {
	b.Run("p256", sigBench(elliptic.P256(), sha256.New))
	b.Run("p384", sigBench(elliptic.P384(), sha512.New384))
	b.Run("rsa4096-pss", func(b *testing.B) {
		key, err := rsa.GenerateKey(rand.Reader, 4096)
		if err != nil {
			b.Fatal(err)
		}
		d := sha512.Sum384([]byte("certificate"))
		opts := &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}
		sig, _ := rsa.SignPSS(rand.Reader, key, crypto.SHA384, d[:], opts)
		b.ResetTimer()
		for b.Loop() {
			if rsa.VerifyPSS(&key.PublicKey, crypto.SHA384, d[:], sig, opts) != nil {
				b.Fatal("no")
			}
		}
	})
}

// ecdsaVerify returns one verification of an ECDSA signature over a
// quote-sized message, hashing included, as the verifiers do it.
func ecdsaVerify(tb testing.TB, curve elliptic.Curve, hash func() hash.Hash) func() bool {
	key, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	msg := make([]byte, 632)
	h := hash()
	h.Write(msg)
	sig, err := ecdsa.SignASN1(rand.Reader, key, h.Sum(nil))
	if err != nil {
		tb.Fatal(err)
	}
	return func() bool {
		h := hash()
		h.Write(msg)
		return ecdsa.VerifyASN1(&key.PublicKey, h.Sum(nil), sig)
	}
}

func sigBench(curve elliptic.Curve, hash func() hash.Hash) func(*testing.B) {
	return func(b *testing.B) {
		verify := ecdsaVerify(b, curve, hash)
		for b.Loop() {
			if !verify() {
				b.Fatal("no")
			}
		}
	}
}

func intelVector(kind string, v func([]byte, intelpcs.Collateral, time.Time) error, quote, tcbInfo, qeIdentity, chain string, at time.Time) func(testing.TB) func() error {
	return func(tb testing.TB) func() error {
		read := func(name string) []byte { return attesttest.Read(tb, kind+"/"+name) }
		raw, col := read(quote), intelpcs.Collateral{TCBInfo: read(tcbInfo), QEIdentity: read(qeIdentity), SigningChain: read(chain)}
		return func() error { return v(raw, col, at) }
	}
}

var (
	sgxVector = intelVector("sgx-dcap", func(raw []byte, col intelpcs.Collateral, at time.Time) error {
		_, err := sgx.Verify(raw, sgx.Options{Collateral: col, At: at})
		return err
	}, "quote_v3_ecdsa_p256_pck_chain.bin", "tcb_info_v3_fmspc_00606A000000.json", "qe_identity_v2.json", "tcb_info_v3_fmspc_00606A000000_certs.pem", time.Unix(1671497404, 0))
	tdxVector = intelVector("tdx", func(raw []byte, col intelpcs.Collateral, at time.Time) error {
		_, err := tdx.Verify(raw, tdx.Options{Collateral: col, At: at})
		return err
	}, "quote_v4_tdx_ecdsa_p256.bin", "tcb_info_v3_tdx_fmspc_C0806F000000.json", "qe_identity_v2_tdx2.json", "tcb_signing_chain_certs.pem", time.Unix(1725263032, 0))
)

func snpVector(testing.TB) func() error {
	at := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() error {
		_, err := snp.Verify(sevtestdata.AttestationBytes, snp.Options{At: at, VCEK: sevtestdata.VcekBytes})
		return err
	}
}

// realVector verifies a real evidence file of the verifiers' testdata at
// a time its provenance accepts it, its folder as collateral.
func realVector(folder, name, at string) func(testing.TB) func() error {
	return func(tb testing.TB) func() error {
		dir := attesttest.Real(tb, folder)
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			tb.Fatal(err)
		}
		t, err := ParseTime(at)
		if err != nil {
			tb.Fatal(err)
		}
		typ, err := attest.ParseType(filepath.Dir(folder))
		if err != nil {
			tb.Fatal(err)
		}
		return func() error {
			_, err := Evidence(attest.Evidence{Type: typ, Raw: raw}, Options{At: t, CollateralDir: dir})
			return err
		}
	}
}

func nitroVector(tb testing.TB) func() error {
	raw, err := os.ReadFile(filepath.Join(attesttest.Real(tb, "nitro/evervault-beta"), "valid-attestation-doc-bytes"))
	if err != nil {
		tb.Fatal(err)
	}
	at := time.Unix(1665651482, 0)
	return func() error {
		_, err := nitro.Verify(raw, nitro.Options{At: at})
		return err
	}
}
