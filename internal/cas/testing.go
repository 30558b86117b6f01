package cas

import (
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
)

// StartForTest runs a simulated CAS on 127.0.0.1 with its state in dir
// until the test ends or stop is called, pinning LASKeyForTest; it
// returns the URL and the TLS certificate file to trust.
func StartForTest(t testing.TB, dir, sealer string) (url, caFile string, stop func()) {
	t.Helper()
	return StartConfigForTest(t, Config{StateDir: dir, Sealer: sealer, Simulation: true, SimKeys: LASPubFileForTest(t)})
}

// LASKeyForTest is the simulation key of the tests' LAS: StartForTest's
// CAS takes simulated workload evidence signed by it.
var LASKeyForTest = sync.OnceValue(testKey)

// BoardKeyForTest is the board of the tests' CASes (given at init with
// BoardPEMForTest): it approves their new policy names.
var BoardKeyForTest = sync.OnceValue(testKey)

// BoardPEMForTest is BoardKeyForTest's public key, for an init request.
func BoardPEMForTest() string {
	der, err := x509.MarshalPKIXPublicKey(&BoardKeyForTest().PublicKey)
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

// LASPubFileForTest is a file with LASKeyForTest's public key, for
// Config.SimKeys.
func LASPubFileForTest(t testing.TB) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&LASKeyForTest().PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "las.pub.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// SimKeyForTest is the public key a simulated CAS on state folder dir
// signs its own evidence with, for client.Expect.
func SimKeyForTest(t testing.TB, dir string) *ecdsa.PublicKey {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, SimulationPubKeyFile))
	if err != nil {
		t.Fatalf("the CAS's simulation key: %v", err)
	}
	k, err := keyfile.ParsePublic(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// StartConfigForTest is StartForTest with the whole configuration; Listen
// and Ready are set here.
func StartConfigForTest(t testing.TB, cfg Config) (url, caFile string, stop func()) {
	t.Helper()
	return StartLoggedForTest(t, cfg, io.Discard)
}

// StartLoggedForTest is StartConfigForTest with CAS's log (JSON) written
// to w.
func StartLoggedForTest(t testing.TB, cfg Config, w io.Writer) (url, caFile string, stop func()) {
	t.Helper()
	dir := cfg.StateDir
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	cfg.Listen, cfg.Ready = "127.0.0.1:0", func(a string) { addr <- a }
	go func() {
		done <- Run(ctx, cfg, slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
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
	caFile = filepath.Join(dir, tlsCertFile)
	if _, err := os.Stat(caFile); err != nil {
		t.Fatal(err)
	}
	return url, caFile, stop
}

// InitTokenForTest is the init token a CAS started on state folder dir
// made for itself.
func InitTokenForTest(t testing.TB, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, InitTokenFile))
	if err != nil {
		t.Fatalf("the init token: %v", err)
	}
	return strings.TrimSpace(string(raw))
}
