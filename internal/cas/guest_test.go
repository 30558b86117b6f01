package cas

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/produce"
)

// A CAS told it runs in a confidential VM does not start without the VM's
// evidence (it would otherwise serve unattested), nor with simulation.
func TestTEEFailsClosed(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{StateDir: filepath.Join(dir, "a"), TEE: true, Guest: produce.Paths{TSM: missing, SEVGuest: missing, TDXGuest: missing, NSM: missing}}, "--tee: no evidence producer"},
		{Config{StateDir: filepath.Join(dir, "b"), TEE: true, Simulation: true}, "exclude each other"},
		{Config{StateDir: filepath.Join(dir, "c"), TestRoots: missing}, "--insecure-test-roots"},
	} {
		tc.cfg.Listen = "127.0.0.1:0"
		err := Run(context.Background(), tc.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
