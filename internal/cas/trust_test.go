package cas_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// relay is a TLS server with its own key that forwards every request to
// CAS: what a machine in the middle would be.
func relay(t *testing.T, casURL string) string {
	t.Helper()
	target, _ := url.Parse(casURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a proxy in front of CAS for the test; the client under test verifies
	srv := httptest.NewTLSServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A client trusts CAS by the evidence binding its TLS key: simulated
// evidence only when asked, never a relay's key, and the key it saw is
// pinned for every later connection.
func TestAttestedConnection(t *testing.T) {
	dir := t.TempDir()
	casURL, _, _ := castest.Start(t, dir, "none")
	ctx := context.Background()
	sim := casclient.Expect{Policy: attest.Policy{AllowSimulation: true}}
	sim.Verify.SimKeys = []*ecdsa.PublicKey{castest.SimKey(t, dir)}

	c, got, err := casclient.NewAttested(ctx, casURL, sim, nil)
	if err != nil {
		t.Fatalf("attesting a simulated CAS with simulation allowed: %v", err)
	}
	if !got.Claims.Insecure || got.PublicKey.State != "uninitialized" {
		t.Errorf("claims insecure=%v, state %q", got.Claims.Insecure, got.PublicKey.State)
	}
	rec, _ := policy.NewKey()
	if _, err := c.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, dir)); err != nil {
		t.Fatalf("init over the attested connection: %v", err)
	}

	if _, _, err := casclient.NewAttested(ctx, casURL, casclient.Expect{}, nil); err == nil || !strings.Contains(err.Error(), "simulation: ") {
		t.Errorf("simulated CAS without AllowSimulation: %v", err)
	}

	relayed := relay(t, casURL)
	if _, _, err := casclient.NewAttested(ctx, relayed, sim, nil); err == nil || !strings.Contains(err.Error(), "report-data") {
		t.Errorf("through a relay with its own key: %v, want the report-data check to fail", err)
	}

	// Attested directly, then the network sends the next connection to
	// the relay: the pin refuses it.
	var to atomic.Value
	to.Store(strings.TrimPrefix(casURL, "https://"))
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, to.Load().(string))
	}
	pinned, _, err := casclient.NewAttested(ctx, "https://cas.example:8081", sim, dial)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pinned.Version(ctx); err != nil {
		t.Fatalf("pinned client to CAS: %v", err)
	}
	to.Store(strings.TrimPrefix(relayed, "https://"))
	pinned.CloseIdleConnections()
	if _, err := pinned.Version(ctx); err == nil || !strings.Contains(err.Error(), "another TLS key") {
		t.Errorf("pinned client to the relay: %v", err)
	}
}

// A simulated CAS is trusted only by the simulation key it is pinned to:
// another simulated CAS at its address (whose key signs as well as any)
// is refused by name, and so is every simulated CAS when no key is
// given. The key stays across restarts, so a pin does too.
func TestSimulatedCASIsPinned(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	casURL, _, stop := castest.Start(t, dir, "none")
	forgedURL, _, _ := castest.Start(t, t.TempDir(), "none")
	pin := casclient.Expect{Policy: attest.Policy{AllowSimulation: true}}
	pin.Verify.SimKeys = []*ecdsa.PublicKey{castest.SimKey(t, dir)}

	if _, _, err := casclient.NewAttested(ctx, forgedURL, pin, nil); attest.CheckOf(err) != attest.CheckChain || !strings.Contains(err.Error(), "which is not pinned") {
		t.Errorf("another simulated CAS: %v, want its key refused as not pinned", err)
	}
	unpinned := casclient.Expect{Policy: attest.Policy{AllowSimulation: true}}
	if _, _, err := casclient.NewAttested(ctx, casURL, unpinned, nil); attest.CheckOf(err) != attest.CheckChain || !strings.Contains(err.Error(), "no key was given") {
		t.Errorf("no simulation key given: %v", err)
	}
	stop()
	casURL, _, _ = castest.Start(t, dir, "none")
	if _, _, err := casclient.NewAttested(ctx, casURL, pin, nil); err != nil {
		t.Errorf("the pinned key after a restart: %v", err)
	}
}

// A CAS without simulation (and without a TEE, as here) offers no
// evidence: a client that would trust it by attestation is told why.
func TestAttestedConnectionNeedsEvidence(t *testing.T) {
	casURL, _, _ := castest.StartConfig(t, cas.Config{StateDir: t.TempDir(), Sealer: "none"})
	_, _, err := casclient.NewAttested(context.Background(), casURL, casclient.Expect{Policy: attest.Policy{AllowSimulation: true}}, nil)
	if err == nil || !strings.Contains(err.Error(), "offers no evidence") {
		t.Fatalf("CAS without evidence: %v", err)
	}
}
