// Package castest starts real CAS processes for tests: in simulation, on
// 127.0.0.1, with the tests' fixed LAS and board keys. It lives apart from
// the daemon's package so that cloister-cas never links the testing
// package.
package castest

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/cas"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
)

// Start runs a simulated CAS on 127.0.0.1 with its state in dir
// until the test ends or stop is called, pinning LASKey; it
// returns the URL and the TLS certificate file to trust.
func Start(t testing.TB, dir, sealer string) (url, caFile string, stop func()) {
	t.Helper()
	return StartConfig(t, cas.Config{StateDir: dir, Sealer: sealer, Simulation: true, SimKeys: LASPubFile(t)})
}

// LASKey is the simulation key of the tests' LAS: Start's
// CAS takes simulated workload evidence signed by it.
var LASKey = sync.OnceValue(testKey)

// BoardKey is the board of the tests' CASes (given at init with
// BoardPEM): it approves their new policy names.
var BoardKey = sync.OnceValue(testKey)

// BoardPEM is BoardKey's public key, for an init request.
func BoardPEM() string {
	der, err := x509.MarshalPKIXPublicKey(&BoardKey().PublicKey)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// testKey makes one of the tests' fixed keys.
func testKey() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// LASPubFile is a file with LASKey's public key, for
// Config.SimKeys.
func LASPubFile(t testing.TB) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&LASKey().PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "las.pub.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// SimKey is the public key a simulated CAS on state folder dir
// signs its own evidence with, for client.Expect.
func SimKey(t testing.TB, dir string) *ecdsa.PublicKey {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, cas.SimulationPubKeyFile))
	if err != nil {
		t.Fatalf("the CAS's simulation key: %v", err)
	}
	k, err := keyfile.ParsePublic(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// StartConfig is Start with the whole configuration; Ready is set
// here, and Listen when empty (a free port of 127.0.0.1; a CAS restarted
// on its state keeps its address by giving it).
func StartConfig(t testing.TB, cfg cas.Config) (url, caFile string, stop func()) {
	t.Helper()
	return StartLogged(t, cfg, io.Discard)
}

// StartLogged is StartConfig with CAS's log (JSON) written
// to w.
func StartLogged(t testing.TB, cfg cas.Config, w io.Writer) (url, caFile string, stop func()) {
	t.Helper()
	dir := cfg.StateDir
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	cfg.Listen, cfg.Ready = cmp.Or(cfg.Listen, "127.0.0.1:0"), func(a string) { addr <- a }
	go func() {
		done <- cas.Run(ctx, cfg, slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}()
	select {
	case a := <-addr:
		url = "https://" + a
	case err := <-done:
		cancel()
		t.Fatalf("CAS did not start: %v", err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("CAS stopped with %v", err)
		}
	}
	t.Cleanup(stop)
	caFile = filepath.Join(dir, cas.TLSCertFile)
	if _, err := os.Stat(caFile); err != nil {
		t.Fatal(err)
	}
	return url, caFile, stop
}

// InitToken is the init token a CAS started on state folder dir
// made for itself.
func InitToken(t testing.TB, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, cas.InitTokenFile))
	if err != nil {
		t.Fatalf("the init token: %v", err)
	}
	return strings.TrimSpace(string(raw))
}

// StateTrusted is the state (wire.State) of the CAS at url, read over a
// connection trusted by its evidence as expect says, as the CLI and the
// operator trust a CAS in a TEE.
func StateTrusted(t testing.TB, url string, expect casclient.Expect) string {
	t.Helper()
	c, _, err := casclient.NewAttested(context.Background(), url, expect, nil)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := c.PublicKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pk.State
}
