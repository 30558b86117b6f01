package sigstruct

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/attesttest"
	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

// sdmLayout writes a SIGSTRUCT's fields where the SDM (vol. 3D, "Enclave
// Signature Structure") puts them, on its own: the parser's offsets are
// not used, so a wrong offset there fails these tests.
type sdmLayout struct {
	date                   uint32
	miscSelect, miscMask   uint32
	attributes, attrMask   [16]byte
	enclaveHash            [32]byte
	isvProdID, isvSVN      uint16
	modulusLE, signatureLE []byte
	q1LE, q2LE             []byte
	swDefined              uint32
	familyID, extProdID    [16]byte
	vendor                 uint32
	cetAttributes, cetMask byte
}

func (l *sdmLayout) bytes() []byte {
	b := make([]byte, 1808)
	copy(b[0:], mustHex("06000000E10000000000010000000000"))  // HEADER
	binary.LittleEndian.PutUint32(b[16:], l.vendor)           // VENDOR
	binary.LittleEndian.PutUint32(b[20:], l.date)             // DATE, BCD
	copy(b[24:], mustHex("01010000600000006000000001000000")) // HEADER2
	binary.LittleEndian.PutUint32(b[40:], l.swDefined)        // SWDEFINED
	copy(b[128:], l.modulusLE)                                // MODULUS
	binary.LittleEndian.PutUint32(b[512:], 3)                 // EXPONENT
	copy(b[516:], l.signatureLE)                              // SIGNATURE
	binary.LittleEndian.PutUint32(b[900:], l.miscSelect)      // MISCSELECT
	binary.LittleEndian.PutUint32(b[904:], l.miscMask)        // MISCMASK
	b[908], b[909] = l.cetAttributes, l.cetMask               // CET_ATTRIBUTES(_MASK)
	copy(b[912:], l.familyID[:])                              // ISVFAMILYID
	copy(b[928:], l.attributes[:])                            // ATTRIBUTES
	copy(b[944:], l.attrMask[:])                              // ATTRIBUTEMASK
	copy(b[960:], l.enclaveHash[:])                           // ENCLAVEHASH
	copy(b[1008:], l.extProdID[:])                            // ISVEXTPRODID
	binary.LittleEndian.PutUint16(b[1024:], l.isvProdID)      // ISVPRODID
	binary.LittleEndian.PutUint16(b[1026:], l.isvSVN)         // ISVSVN
	copy(b[1040:], l.q1LE)                                    // Q1
	copy(b[1424:], l.q2LE)                                    // Q2
	return b
}

// signedRegions is what the SDM says the signature covers: bytes 0..127
// and 900..1027.
func signedRegions(b []byte) []byte {
	return append(append([]byte(nil), b[0:128]...), b[900:1028]...)
}

func reversed(b []byte) []byte {
	r := bytes.Clone(b)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return r
}

// openssl runs the openssl command, skipping the test where there is none.
func openssl(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		testskip.Skipf(t, "openssl is not installed: the SIGSTRUCT signed by an independent signer is not tested")
	}
	cmd := exec.Command("openssl", args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// opensslSigned lays out a SIGSTRUCT and has openssl sign it with a new
// RSA-3072 key of exponent 3; it returns the SIGSTRUCT and the key's
// modulus, big-endian, as openssl prints it.
func opensslSigned(t *testing.T, l *sdmLayout) ([]byte, []byte) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "key.pem")
	openssl(t, nil, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:3072", "-pkeyopt", "rsa_keygen_pubexp:3", "-out", key)
	modHex := strings.TrimSpace(strings.TrimPrefix(string(openssl(t, nil, "rsa", "-in", key, "-noout", "-modulus")), "Modulus="))
	modulus, err := hex.DecodeString(modHex)
	if err != nil || len(modulus) != 384 {
		t.Fatalf("openssl modulus %q: %v", modHex, err)
	}
	l.modulusLE = reversed(modulus)
	sig := openssl(t, signedRegions(l.bytes()), "dgst", "-sha256", "-sign", key)
	if len(sig) != 384 {
		t.Fatalf("openssl signature of %d bytes", len(sig))
	}
	// Q1 and Q2 per the SDM, from the signature and modulus openssl gave.
	s, m := new(big.Int).SetBytes(sig), new(big.Int).SetBytes(modulus)
	q1 := new(big.Int).Div(new(big.Int).Mul(s, s), m)
	s3 := new(big.Int).Mul(new(big.Int).Mul(s, s), s)
	q2 := new(big.Int).Div(new(big.Int).Sub(s3, new(big.Int).Mul(new(big.Int).Mul(q1, s), m)), m)
	l.signatureLE = reversed(sig)
	l.q1LE = reversed(q1.FillBytes(make([]byte, 384)))
	l.q2LE = reversed(q2.FillBytes(make([]byte, 384)))
	return l.bytes(), modulus
}

func TestOpenSSLSigned(t *testing.T) {
	l := &sdmLayout{date: 0x20261129, miscSelect: 0, miscMask: 0xffffffff, isvProdID: 7, isvSVN: 3, swDefined: 0xabcd, cetAttributes: 0, cetMask: 0}
	copy(l.attributes[:], mustHex("0400000000000000e700000000000000")) // MODE64BIT; XFRM x87,SSE,AVX,AVX-512
	copy(l.attrMask[:], mustHex("fdffffffffffffff1bffffffffffffff"))
	for i := range l.enclaveHash {
		l.enclaveHash[i] = byte(0xa0 + i)
	}
	raw, modulus := opensslSigned(t, l)
	e, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	wantSigner := sha256.Sum256(reversed(modulus))
	if !bytes.Equal(e.MRENCLAVE, l.enclaveHash[:]) || !bytes.Equal(e.MRSIGNER, wantSigner[:]) {
		t.Errorf("MRENCLAVE %x MRSIGNER %x, want %x %x", e.MRENCLAVE, e.MRSIGNER, l.enclaveHash, wantSigner)
	}
	if e.ISVProdID != 7 || e.ISVSVN != 3 || e.Date != "20261129" || e.Debug() || e.DebugPinned() {
		t.Errorf("ISVPRODID %d ISVSVN %d date %s debug %v pinned %v", e.ISVProdID, e.ISVSVN, e.Date, e.Debug(), e.DebugPinned())
	}
	if !bytes.Equal(e.Attributes, l.attributes[:]) || !bytes.Equal(e.AttributesMask, l.attrMask[:]) || e.MiscMask != 0xffffffff {
		t.Errorf("attributes %x/%x misc %x", e.Attributes, e.AttributesMask, e.MiscMask)
	}

	// Every signed byte is covered: a change anywhere in the two regions
	// is refused, as are changes to the signature, modulus and Q1/Q2.
	for _, off := range []int{0, 16, 20, 40, 127, 128, 511, 516, 899, 900, 904, 928, 944, 960, 991, 1024, 1026, 1027, 1040, 1423, 1424, 1807} {
		bad := bytes.Clone(raw)
		bad[off] ^= 0x01
		if _, err := Parse(bad); err == nil {
			t.Errorf("byte %d changed: accepted", off)
		}
	}
	// Unsigned reserved bytes change nothing EINIT checks.
	bad := bytes.Clone(raw)
	bad[1030] ^= 1
	if _, err := Parse(bad); err != nil {
		t.Errorf("reserved byte 1030 changed: %v", err)
	}
}

func TestDebugSigned(t *testing.T) {
	l := &sdmLayout{date: 0x20261129}
	copy(l.attributes[:], mustHex("0600000000000000"))
	copy(l.attrMask[:], mustHex("ffffffffffffffff"))
	raw, _ := opensslSigned(t, l)
	e, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Debug() || !e.DebugPinned() {
		t.Errorf("debug %v pinned %v, want both", e.Debug(), e.DebugPinned())
	}
}

// TestFortanixSigned reads a SIGSTRUCT made by Fortanix's signing tool
// (published by oasis-core as test data), with its signer's private key:
// MRSIGNER is computed here from that key, not from the SIGSTRUCT.
func TestFortanixSigned(t *testing.T) {
	raw := attesttest.Read(t, "sgx-sigstruct/sig1.sigstruct.bin")
	block, _ := pem.Decode(attesttest.Read(t, "sgx-sigstruct/sig1.key.pem"))
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	signer := sha256.Sum256(reversed(key.N.FillBytes(make([]byte, 384))))
	if want := mustHex("c50673624a6cb17c1c6c2a4e6906f47a170c4629b8723781d1017ef376f1a75d"); !bytes.Equal(e.MRENCLAVE, want) {
		t.Errorf("MRENCLAVE %x, want %x", e.MRENCLAVE, want)
	}
	if !bytes.Equal(e.MRSIGNER, signer[:]) {
		t.Errorf("MRSIGNER %x, want %x", e.MRSIGNER, signer)
	}
	// oasis-core's test builds it with flags 0x04 (MODE64BIT), XFRM 0x03,
	// and a mask of all but DEBUG in the flags.
	if got := hex.EncodeToString(e.Attributes); got != "04000000000000000300000000000000" {
		t.Errorf("attributes %s", got)
	}
	if e.Debug() || e.DebugPinned() || e.Date != "20160109" {
		t.Errorf("debug %v pinned %v date %s", e.Debug(), e.DebugPinned(), e.Date)
	}
}

func TestRefused(t *testing.T) {
	raw := attesttest.Read(t, "sgx-sigstruct/sig1.sigstruct.bin")
	for name, tc := range map[string]struct {
		mutate func([]byte) []byte
		want   string
	}{
		"short":      {func(b []byte) []byte { return b[:1807] }, "1807 bytes"},
		"long":       {func(b []byte) []byte { return append(b, 0) }, "1809 bytes"},
		"header":     {func(b []byte) []byte { b[0] = 7; return b }, "HEADER is"},
		"header2":    {func(b []byte) []byte { b[24] = 2; return b }, "HEADER2 is"},
		"vendor":     {func(b []byte) []byte { b[16] = 1; return b }, "VENDOR is"},
		"exponent":   {func(b []byte) []byte { b[512] = 0x01; b[514] = 1; return b }, "EXPONENT is 65537"},
		"modulus":    {func(b []byte) []byte { b[511] = 0; return b }, "MODULUS has"},
		"signature":  {func(b []byte) []byte { b[600] ^= 0x80; return b }, "SIGNATURE does not verify"},
		"isvsvn":     {func(b []byte) []byte { b[1026]++; return b }, "SIGNATURE does not verify"},
		"q2":         {func(b []byte) []byte { b[1500] ^= 1; return b }, "Q1 or Q2"},
		"sig-over-n": {func(b []byte) []byte { copy(b[516:900], b[128:512]); return b }, "not below the modulus"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.mutate(bytes.Clone(raw)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(attesttest.Read(f, "sgx-sigstruct/sig1.sigstruct.bin"))
	f.Add(make([]byte, Size))
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := Parse(raw)
		if err != nil {
			return
		}
		// Whatever verifies has its MRSIGNER from its modulus.
		want := sha256.Sum256(raw[128:512])
		if !bytes.Equal(e.MRSIGNER, want[:]) {
			t.Fatalf("MRSIGNER %x, not the modulus' hash", e.MRSIGNER)
		}
	})
}

// BenchmarkParse is one SIGSTRUCT checked as EINIT checks it: an RSA-3072
// verification with exponent 3 and the Q1/Q2 arithmetic.
func BenchmarkParse(b *testing.B) {
	raw := attesttest.Read(b, "sgx-sigstruct/sig1.sigstruct.bin")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}
