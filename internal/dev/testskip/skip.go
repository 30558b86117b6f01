// Package testskip records why a test skipped, for the end of make test:
// a package of its own, with nothing but the standard library, so tests
// cross-compiled for other platforms (the device plugins' under qemu) do
// not compile testenv's Kubernetes client with them.
package testskip

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// EnvSkipLog names the file make test collects skips in; it prints them
// at the end, since go test without -v does not.
const EnvSkipLog = "CLOISTER_SKIP_LOG"

// Skipf skips a test that needs what this machine lacks (real evidence,
// root, the real node) and records why, so the end of make test says
// which tests did not run.
func Skipf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	reason := fmt.Sprintf(format, args...)
	if path := os.Getenv(EnvSkipLog); path != "" {
		line := tb.Name() + ": " + strings.ReplaceAll(reason, "\n", " ") + "\n"
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			_, _ = f.WriteString(line)
			_ = f.Close()
		}
	}
	tb.Skip(reason)
}
