package cas_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/collateral/collateraltest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// With --pcs, CAS verifies real SGX evidence against collateral it
// fetched and cached (the quote binds no key of this request, so it is
// refused at the binding, past the collateral), and its public key says
// what its cache holds, for the operator's status.
func TestCASFetchesCollateral(t *testing.T) {
	pcs := collateraltest.RealPCS(t)
	dir := t.TempDir()
	url, caFile, _ := castest.StartConfig(t, cas.Config{StateDir: dir, Sealer: "none", PCS: pcs.URL})
	c, _ := initAt(t, url, caFile)
	pk, err := c.PublicKey(context.Background())
	if err != nil || pk.Collateral == nil || pk.Collateral.Entries != 0 {
		t.Fatalf("before any evidence: %+v %v", pk, err)
	}
	owner, _ := policy.NewKey()
	doc := `version: cloister.dev/policy/v1
name: vault
owners: {keys: ["` + pemKey(owner) + `"]}
services: [{name: api, attestation: {identities: [{type: sgx, mrenclave: "` + strings.Repeat("11", 32) + `"}]}, certificate: {sans: [api.vault]}}]
`
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, doc, owner)); err != nil {
		t.Fatal(err)
	}
	quote, _ := collateraltest.RealQuotes(t)
	req := simRequest(t, "vault", "api", nil)
	req.Evidence = attest.Evidence{Type: attest.SGX, Raw: quote.Raw}
	_, err = c.AttestRaw(context.Background(), req)
	if err == nil || len(pcs.Requests()) != 4 {
		t.Fatalf("SGX evidence: %v after %d requests to the PCS, want a refusal after fetching 4 documents", err, len(pcs.Requests()))
	}
	pk, err = c.PublicKey(context.Background())
	if err != nil || pk.Collateral == nil || pk.Collateral.Entries != 1 || pk.Collateral.NextUpdate == nil ||
		!pk.Collateral.NextUpdate.Equal(time.Date(2023, 1, 15, 12, 45, 36, 0, time.UTC)) {
		t.Errorf("after: %+v %v", pk.Collateral, err)
	}
}
