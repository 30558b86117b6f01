package supervisor_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/enclave/supervisor"
)

// A simulated enclave given its owner's key (the pod's manifest-key.pub)
// takes the mounted manifest only with the owner's signature beside it
// (manifest.sig): unsigned or signed by a stranger, the sync is refused
// and the supervisor ends, saying why; signed, the enclave runs it.
func TestSupervisorSyncsOnlySignedManifests(t *testing.T) {
	t.Setenv(asOrchestrator, "1")
	dir := t.TempDir()
	owner, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub, err := keyfile.PublicPEM(&owner.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPath, sigPath, manifestPath := filepath.Join(dir, manifest.KeyFile), filepath.Join(dir, manifest.SignatureFile), filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(keyPath, []byte(pub), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &manifest.Manifest{Version: manifest.Version, Enclave: manifest.Size{CPUs: 2, MemoryMiB: 2048}, Plugins: []manifest.Plugin{
		plugin("api", "exec sleep 60", "Always"),
	}}
	writeManifest(t, manifestPath, m)
	run := func(sig string) (string, error) {
		t.Helper()
		if sig == "" {
			_ = os.Remove(sigPath)
		} else if err := os.WriteFile(sigPath, []byte(sig+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		logs := &testenv.Buffer{}
		s := &supervisor.Supervisor{
			Backend:  &supervisor.Sim{Program: []string{os.Args[0], "orchestrator", "--simulation", "--manifest-key", keyPath}, Dir: dir},
			Manifest: manifestPath, Signature: sigPath, Log: slog.New(slog.NewJSONHandler(logs, nil)), Interval: 50 * time.Millisecond, EnclaveLog: logs,
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err := s.Run(ctx)
		return logs.String(), err
	}
	for name, sig := range map[string]string{"unsigned": "", "signed by a stranger": mustSign(t, m, stranger)} {
		if _, err := run(sig); err == nil || !strings.Contains(err.Error(), "403 Forbidden") || !strings.Contains(err.Error(), "not signed by the key the enclave image carries") {
			t.Errorf("%s: %v", name, err)
		}
	}
	logs, err := run(mustSign(t, m, owner))
	if !strings.Contains(logs, `"msg":"manifest synced into the enclave"`) || (err != nil && !strings.Contains(err.Error(), "context deadline exceeded")) {
		t.Errorf("the owner's manifest: %v\n%s", err, logs)
	}
}

func mustSign(t *testing.T, m *manifest.Manifest, k *ecdsa.PrivateKey) string {
	t.Helper()
	s, err := manifest.Sign(m, k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
