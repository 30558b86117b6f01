package cas_test

import (
	"context"
	"os"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
)

// A client that pinned CAS's tls.crt (cloister ... --cas-ca) reaches it
// after a restart, when its owners need it most; new names make a new
// certificate.
func TestPinnedCertificateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	_, caFile, stop := castest.Start(t, dir, "none")
	pinned, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	url, _, stop2 := castest.Start(t, dir, "none")
	c, err := casclient.New(url, pinned, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublicKey(context.Background()); err != nil {
		t.Fatalf("the pinned certificate after a restart: %v", err)
	}
	stop2()
	_, caFile, _ = castest.StartConfig(t, cas.Config{StateDir: dir, Sealer: "none", Simulation: true, TLSSANs: []string{"cas.shop.svc"}})
	if now, _ := os.ReadFile(caFile); string(now) == string(pinned) {
		t.Error("another name, the same certificate")
	}
}
