package sgx_test

import (
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/attest/sgx"
)

// A quote of the test quoting enclave verifies only where its root is a
// test root, and says so; Intel's root refuses it.
func TestTestRootQuote(t *testing.T) {
	now := time.Now()
	s, err := producetest.NewSGXSigner(now)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 384)
	copy(body[48:], []byte{0x04, 0, 0, 0, 0, 0, 0, 0, 0x03}) // MODE64BIT; XFRM
	copy(body[64:], bytes.Repeat([]byte{0xe1}, 32))          // MRENCLAVE
	binary.LittleEndian.PutUint16(body[258:], 2)             // ISVSVN
	copy(body[320:], []byte("report data"))
	quote, err := s.Quote(body)
	if err != nil {
		t.Fatal(err)
	}
	col, err := s.Collateral()
	if err != nil {
		t.Fatal(err)
	}
	c, err := sgx.Verify(quote, sgx.Options{Collateral: col, At: now, TestRoots: []*x509.Certificate{s.Root()}})
	if err != nil {
		t.Fatal(err)
	}
	if !c.TestRoot || c.TCBStatus != attest.TCBUpToDate || !bytes.HasPrefix(c.ReportData, []byte("report data")) ||
		c.SGX.MRENCLAVE[0] != 0xe1 || c.SGX.ISVSVN != 2 || c.Debug {
		t.Errorf("claims %+v %+v", c, c.SGX)
	}
	if _, err := sgx.Verify(quote, sgx.Options{Collateral: col, At: now}); attest.CheckOf(err) != attest.CheckChain {
		t.Errorf("under Intel's root: %v", err)
	}
	bad := bytes.Clone(quote)
	bad[48+320]++ // the report data
	if _, err := sgx.Verify(bad, sgx.Options{Collateral: col, At: now, TestRoots: []*x509.Certificate{s.Root()}}); attest.CheckOf(err) != attest.CheckSignature {
		t.Errorf("changed report data: %v", err)
	}
}
