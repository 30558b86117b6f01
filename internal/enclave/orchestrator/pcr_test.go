package orchestrator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/nitro"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// An enclave on a (fake) Nitro Secure Module: each manifest it applies
// extends and locks a PCR of its own before it runs, so a change taken
// back leaves PCRs no clean boot has, and a verifier that pins the
// manifest accepts only an enclave that ran it alone, with the user data
// free for a CSR key's binding (as CAS asks).
func TestManifestsExtendLockedPCRs(t *testing.T) {
	boot := func() (*Orchestrator, *producetest.NSM) {
		nsm, err := producetest.NewNSM(time.Now())
		if err != nil {
			t.Fatal(err)
		}
		o, _ := newOrchestrator(t)
		o.NewAttester = func(*manifest.Manifest) (Attester, error) { return NSMAttester(nsm), nil }
		return o, nsm
	}
	a := testManifest(shPlugin("app", "sleep 60", "Always", manifest.Env{Name: "MODE", Value: "a"}))
	b := testManifest(shPlugin("app", "sleep 60", "Always", manifest.Env{Name: "MODE", Value: "b"}))
	digest := func(m *manifest.Manifest) attest.Bytes {
		d, _ := hex.DecodeString(m.ManifestDigest())
		return d
	}
	keyHash := sha256.Sum256([]byte("the CSR's public key"))
	claims := func(o *Orchestrator, nsm *producetest.NSM) *attest.Claims {
		t.Helper()
		// What a plugin asks for to attest at CAS: its key's hash as the
		// user data, through the plugins' endpoint.
		req := httptest.NewRequest(http.MethodGet, PathEvidence+"?nonce=00aa&reportData="+hex.EncodeToString(keyHash[:]), nil)
		rec := httptest.NewRecorder()
		o.PluginHandler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("the plugins' evidence: %d %s", rec.Code, rec.Body)
		}
		c, err := nitro.Verify(rec.Body.Bytes(), nitro.Options{At: time.Now(), TestRoots: []*x509.Certificate{nsm.Root()}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pin := &attest.Policy{ReportData: keyHash[:], Identities: []attest.Identity{{Type: attest.Nitro, Manifest: digest(a)}}}

	clean, cleanNSM := boot()
	if rec := httptest.NewRecorder(); func() int {
		clean.PluginHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathEvidence+"?nonce=00&reportData=00", nil))
		return rec.Code
	}() != http.StatusServiceUnavailable {
		t.Error("evidence before any manifest was applied")
	}
	if err := clean.Apply(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if err := clean.Apply(context.Background(), a); err != nil { // synced again: nothing recorded
		t.Fatal(err)
	}
	cleanClaims := claims(clean, cleanNSM)
	if err := pin.Check(cleanClaims); err != nil {
		t.Errorf("an enclave that ran the pinned manifest alone: %v", err)
	}
	if err := cleanNSM.ExtendPCR(attest.NitroManifestPCR, []byte("more")); err == nil {
		t.Error("the manifest's PCR was not locked")
	}

	reverted, nsm := boot()
	for _, m := range []*manifest.Manifest{a, b, a} {
		if err := reverted.Apply(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	c := claims(reverted, nsm)
	if bytes.Equal(c.Nitro.PCRs[attest.NitroManifestPCR+1], cleanClaims.Nitro.PCRs[attest.NitroManifestPCR+1]) ||
		bytes.Equal(c.Nitro.PCRs[attest.NitroManifestPCR+2], cleanClaims.Nitro.PCRs[attest.NitroManifestPCR+2]) {
		t.Errorf("a change taken back left the PCRs of a clean boot: %v", c.Nitro.PCRs)
	}
	if err := pin.Check(c); err == nil || !strings.Contains(err.Error(), "applied another manifest after the pinned one") {
		t.Errorf("a change taken back, verified against the manifest: %v", err)
	}
}
