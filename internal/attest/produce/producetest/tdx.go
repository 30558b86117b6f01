package producetest

import (
	"bytes"
	"testing"

	tdxdata "github.com/google/go-tdx-guest/testing/testdata"
)

// TDXQuote is go-tdx-guest's sample quote (v4, from real hardware)
// without the marked test suffix it carries after the quote, which a
// verifier refuses as bytes no signature accounts for.
func TDXQuote(tb testing.TB) []byte {
	tb.Helper()
	quote, ok := bytes.CutSuffix(tdxdata.RawQuote, []byte("\nextra bytes(only for testing purpose)\n"))
	if !ok {
		tb.Fatal("go-tdx-guest's sample quote's test suffix changed")
	}
	return quote
}
