package sgx

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
)

// The real quote and collateral are in the team's shared test vectors;
// they are read from there, never copied.
const vectors = "../../../../shared/testvectors/sgx-dcap"

var vectorTime = time.Unix(1671497404, 0)

func load(t testing.TB) ([]byte, Collateral) {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(vectors, name))
		if err != nil {
			t.Skipf("SGX test vectors absent (%v); they live in ../shared/testvectors", err)
		}
		return b
	}
	return read("quote_v3_ecdsa_p256_pck_chain.bin"), Collateral{
		TCBInfo:      read("tcb_info_v3_fmspc_00606A000000.json"),
		QEIdentity:   read("qe_identity_v2.json"),
		SigningChain: read("tcb_info_v3_fmspc_00606A000000_certs.pem"),
	}
}

func TestEmbeddedRootIsIntels(t *testing.T) {
	d := sha256.Sum256(Root().Raw)
	if hex.EncodeToString(d[:]) != RootSHA256 || Root().Subject.CommonName != "Intel SGX Root CA" {
		t.Errorf("embedded root %s (%x)", Root().Subject, d)
	}
}

func TestRealQuoteVerifies(t *testing.T) {
	raw, col := load(t)
	c, err := Verify(raw, Options{Collateral: col, At: vectorTime})
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != attest.SGX || c.SGX.MRENCLAVE.String()[:8] != "68823bc6" || c.Insecure {
		t.Errorf("claims %+v", c)
	}
	if c.NotBefore.After(vectorTime) || c.NotAfter.Before(vectorTime) {
		t.Errorf("validity %s..%s does not hold the vector's time", c.NotBefore, c.NotAfter)
	}
	t.Logf("MRENCLAVE %s MRSIGNER %s ISVPRODID %d ISVSVN %d debug %v TCB %s valid %s..%s",
		c.SGX.MRENCLAVE, c.SGX.MRSIGNER, c.SGX.ISVProdID, c.SGX.ISVSVN, c.Debug, c.TCBStatus, c.NotBefore, c.NotAfter)
}
