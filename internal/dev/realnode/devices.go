package realnode

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FakeDevices are the TEE device nodes a real node gets on a machine
// without TEEs, named as their drivers name them: character devices with
// the null device's numbers (1:3), so the device plugins find and hand them
// out, LAS probes them, and a container that opens one gets the null
// device. Nothing here pretends to be a TEE beyond the name: evidence
// stays simulated and labelled insecure.
var FakeDevices = []string{"sgx_enclave", "sgx_provision", "nitro_enclaves", "z90crypt"}

// MakeFakeDevices creates FakeDevices in dir, mode 0666 as SGX workloads need
// of the SGX devices; existing ones are replaced.
func MakeFakeDevices(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // the fake /dev folder must be readable by the node's pods
		return err
	}
	for _, name := range FakeDevices {
		path := filepath.Join(dir, name)
		_ = os.Remove(path)
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil { //nolint:gosec // a constant device number (1, 3)
			return fmt.Errorf("making fake device %s (needs root and a filesystem without nodev): %w", path, err)
		}
		// mknod applies the umask.
		if err := os.Chmod(path, 0o666); err != nil { //nolint:gosec // a fake device node unprivileged enclaves must open, as the real ones
			return err
		}
	}
	return nil
}
