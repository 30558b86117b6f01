package cex

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// zcrypt drives the kernel's zcrypt multiple-device-node interface: write a
// name to /sys/class/zcrypt/create and the kernel makes
// /sys/devices/virtual/zcrypt/<name> with apmask, aqmask and ioctlmask,
// while udev makes /dev/<name>; a node allows only the adapters, domains
// and ioctls in its masks.
type zcrypt struct {
	sysRoot, devRoot string
	// wait bounds how long udev may take to create the device node.
	wait time.Duration
}

// nodePrefix names the nodes this plugin creates, as IBM's plugin does.
const nodePrefix = "zcrypt_apqn_"

func nodeName(a APQN) string { return fmt.Sprintf("%s%d_%d", nodePrefix, a.Adapter, a.Domain) }

func (z *zcrypt) classFile(name string) string {
	return filepath.Join(z.sysRoot, "class", "zcrypt", name)
}

func (z *zcrypt) nodeDir(name string) string {
	return filepath.Join(z.sysRoot, "devices", "virtual", "zcrypt", name)
}

// DevicePath is the host path of a node.
func (z *zcrypt) devicePath(name string) string { return filepath.Join(z.devRoot, name) }

// supported reports whether the kernel offers multiple zcrypt nodes.
func (z *zcrypt) supported() error {
	if _, err := os.Stat(z.classFile("create")); err != nil {
		return fmt.Errorf("this kernel has no zcrypt multiple device nodes (%s): %w", z.classFile("create"), err)
	}
	return nil
}

// ensure makes (or reuses) the node for a and sets its masks to exactly a's
// adapter, a's domain and every ioctl.
func (z *zcrypt) ensure(a APQN) (string, error) {
	name := nodeName(a)
	if _, err := os.Stat(z.nodeDir(name)); err != nil {
		if err := writeAttr(z.classFile("create"), name); err != nil {
			return "", fmt.Errorf("creating zcrypt node %s: %w", name, err)
		}
	}
	if err := z.awaitNode(name); err != nil {
		_ = writeAttr(z.classFile("destroy"), name)
		return "", err
	}
	for _, m := range []struct{ file, value string }{
		{"apmask", Mask(a.Adapter)},
		{"aqmask", Mask(a.Domain)},
		{"ioctlmask", Mask(allBits()...)},
	} {
		if err := writeAttr(filepath.Join(z.nodeDir(name), m.file), m.value); err != nil {
			_ = writeAttr(z.classFile("destroy"), name)
			return "", fmt.Errorf("restricting zcrypt node %s (%s): %w", name, m.file, err)
		}
	}
	// Containers may run as any user; the node only reaches one APQN.
	if err := os.Chmod(z.devicePath(name), 0o666); err != nil { //nolint:gosec // the container's own zcrypt node, restricted to its APQN, must be openable by its non-root user
		return "", fmt.Errorf("opening zcrypt node %s to containers: %w", name, err)
	}
	return name, nil
}

// awaitNode waits for the kernel's sysfs directory and udev's device node.
func (z *zcrypt) awaitNode(name string) error {
	deadline := time.Now().Add(z.wait)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		_, errDir := os.Stat(z.nodeDir(name))
		_, errDev := os.Stat(z.devicePath(name))
		if errDir == nil && errDev == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zcrypt node %s did not appear within %v (kernel: %w, udev: %w)", name, z.wait, errDir, errDev)
		}
		time.Sleep(pause)
	}
}

// nodes lists the nodes this plugin made (by name).
func (z *zcrypt) nodes() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(z.sysRoot, "devices", "virtual", "zcrypt"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), nodePrefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (z *zcrypt) destroy(name string) error {
	if err := writeAttr(z.classFile("destroy"), name); err != nil {
		return fmt.Errorf("destroying zcrypt node %s: %w", name, err)
	}
	return nil
}

// writeAttr writes a sysfs attribute the way echo does.
func writeAttr(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(value + "\n"); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Mask renders a 256-bit zcrypt mask with the given bits set, in the
// kernel's absolute format: 0x and 64 hex digits, bit 0 leftmost. An
// absolute mask, unlike "+n", also clears bits a reused node had.
func Mask(bits ...int) string {
	var m [32]byte
	for _, b := range bits {
		m[b/8] |= 0x80 >> (b % 8)
	}
	return fmt.Sprintf("0x%x", m)
}

func allBits() []int {
	b := make([]int, 256)
	for i := range b {
		b[i] = i
	}
	return b
}
