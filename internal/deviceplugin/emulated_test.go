package deviceplugin

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

// EnvQEMUUser names the folder of Debian's qemu-user-static binaries
// (qemu-s390x-static, qemu-aarch64-static), which make test installs.
const EnvQEMUUser = "CLOISTER_QEMU_USER"

// The device plugins' own tests, compiled for the machines their hardware
// is in and run there under qemu in user mode (no KVM): the CryptoExpress
// plugin, with the kubelet-facing plugin server and the kernel's uevents,
// on IBM Z (s390x, big-endian); the Nitro plugin on Graviton (arm64).
// Cross-compiling alone would hide byte order and syscall differences.
func TestOnTheirPlatforms(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles tests for two other platforms")
	}
	dir := os.Getenv(EnvQEMUUser)
	if dir == "" {
		testskip.Skipf(t, "%s is not set: make test installs Debian's qemu-user-static and sets it", EnvQEMUUser)
	}
	for _, tc := range []struct {
		arch, qemu string
		machine    elf.Machine
		pkgs       []string
	}{
		{"s390x", "qemu-s390x-static", elf.EM_S390, []string{"cex", "plugin", "uevent"}},
		{"arm64", "qemu-aarch64-static", elf.EM_AARCH64, []string{"nitro"}},
	} {
		for _, pkg := range tc.pkgs {
			t.Run(tc.arch+"/"+pkg, func(t *testing.T) {
				bin := filepath.Join(t.TempDir(), pkg+".test")
				build := exec.Command("go", "test", "-c", "-o", bin, "./"+pkg)
				build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+tc.arch)
				if out, err := build.CombinedOutput(); err != nil {
					t.Fatalf("go test -c for %s: %v\n%s", tc.arch, err, out)
				}
				f, err := elf.Open(bin)
				if err != nil {
					t.Fatal(err)
				}
				if machine := f.Machine; machine != tc.machine {
					t.Fatalf("built for %s, not %s", machine, tc.machine)
				}
				_ = f.Close()
				run := exec.Command(filepath.Join(dir, tc.qemu), bin, "-test.v", "-test.count=1", "-test.timeout=5m") //nolint:gosec // the emulator make test installed, on a test binary built here
				run.Dir = pkg                                                                                         // as go test runs a package's tests: testdata beside them
				out, err := run.CombinedOutput()
				passed := strings.Count(string(out), "--- PASS: ")
				if err != nil || passed == 0 || strings.Contains(string(out), "--- FAIL") {
					t.Fatalf("%s's tests on %s (%d passed): %v\n%s", pkg, tc.arch, passed, err, out)
				}
				t.Logf("%s's tests on %s under %s: %d passed", pkg, tc.arch, tc.qemu, passed)
			})
		}
	}
}
