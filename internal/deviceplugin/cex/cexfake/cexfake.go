// Package cexfake is the part of s390 Linux the CryptoExpress plugin and
// DRA driver talk to, in folders of a test's: the AP bus in sysfs, and
// zcrypt's create and destroy files, which it answers as the kernel and
// udev do (a sysfs node folder with masks, a device node in /dev).
// CryptoExpress hardware cannot exist off IBM Z; this is its lowest
// layer, simulated, with the plugin's real code above it.
package cexfake

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// Kernel answers zcrypt's create and destroy writes under Sys with
// nodes in Dev.
type Kernel struct {
	t         testing.TB
	Sys, Dev  string
	created   atomic.Int64
	destroyed chan string // buffered; a full buffer drops names
	// DeviceNodes makes character devices (the null device's numbers),
	// as a container runtime needs; else empty files. Needs root.
	deviceNodes bool
}

// New is a kernel in t's temp folders.
func New(t testing.TB) *Kernel { return NewIn(t, t.TempDir(), t.TempDir(), false) }

// NewIn is a kernel with sysfs at sys and devices at dev; with
// deviceNodes its zcrypt nodes are character devices a container can be
// given.
func NewIn(t testing.TB, sys, dev string, deviceNodes bool) *Kernel {
	k := &Kernel{t: t, Sys: sys, Dev: dev, destroyed: make(chan string, 100), deviceNodes: deviceNodes}
	k.Mkdir("devices/ap")
	k.Mkdir("class/zcrypt")
	k.Mkdir("devices/virtual/zcrypt")
	k.Write("class/zcrypt/create", "")
	k.Write("class/zcrypt/destroy", "")
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(filepath.Join(k.Sys, "class/zcrypt")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.Events {
			if !ev.Has(fsnotify.Write) {
				continue
			}
			b, _ := os.ReadFile(ev.Name)
			name := strings.TrimSpace(string(b))
			if name == "" {
				continue
			}
			// Consume the write: the plugin's open(O_TRUNC) and write each
			// make an event, and the kernel acts once per write.
			_ = os.Truncate(ev.Name, 0)
			switch filepath.Base(ev.Name) {
			case "create":
				node := filepath.Join("devices/virtual/zcrypt", name)
				if _, err := os.Stat(filepath.Join(k.Sys, node)); err == nil {
					continue // the kernel refuses an existing name
				}
				k.Mkdir(node)
				for _, m := range []string{"apmask", "aqmask", "ioctlmask"} {
					k.Write(filepath.Join(node, m), "0x"+strings.Repeat("0", 64))
				}
				if err := k.makeNode(filepath.Join(k.Dev, name)); err != nil {
					t.Error(err)
				}
				k.created.Add(1)
			case "destroy":
				_ = os.RemoveAll(filepath.Join(k.Sys, "devices/virtual/zcrypt", name))
				_ = os.Remove(filepath.Join(k.Dev, name))
				select {
				case k.destroyed <- name:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { _ = w.Close(); <-done })
	return k
}

func (k *Kernel) makeNode(path string) error {
	if !k.deviceNodes {
		return os.WriteFile(path, nil, 0o600)
	}
	return unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))) //nolint:gosec // a constant device number (1, 3)
}

// Created counts the nodes made.
func (k *Kernel) Created() int64 { return k.created.Load() }

// Mkdir makes a folder under Sys.
func (k *Kernel) Mkdir(rel string) {
	if err := os.MkdirAll(filepath.Join(k.Sys, rel), 0o750); err != nil {
		k.t.Fatal(err)
	}
}

// Write sets a sysfs file's content.
func (k *Kernel) Write(rel, content string) {
	if err := os.WriteFile(filepath.Join(k.Sys, rel), []byte(content+"\n"), 0o600); err != nil {
		k.t.Fatal(err)
	}
}

// Read is a sysfs file's content.
func (k *Kernel) Read(rel string) string {
	b, err := os.ReadFile(filepath.Join(k.Sys, rel))
	if err != nil {
		k.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Card plugs in adapter a of model (CEX8P) with online queues for domains.
// Like the kernel, it fills the card before it appears on the bus.
func (k *Kernel) Card(a int, model string, domains ...int) {
	staging := filepath.Join(k.Sys, "staging")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		k.t.Fatal(err)
	}
	k.Write("staging/type", model)
	k.Write("staging/online", "1")
	for _, d := range domains {
		q := fmt.Sprintf("staging/%02x.%04x", a, d)
		k.Mkdir(q)
		k.Write(q+"/online", "1")
	}
	if err := os.Rename(staging, filepath.Join(k.Sys, fmt.Sprintf("devices/ap/card%02x", a))); err != nil {
		k.t.Fatal(err)
	}
}

// Queue adds a domain to a plugged card.
func (k *Kernel) Queue(a, d int) {
	q := fmt.Sprintf("devices/ap/card%02x/%02x.%04x", a, a, d)
	k.Mkdir(q)
	k.Write(q+"/online", "1")
}

// SetOnline turns a queue on or off line.
func (k *Kernel) SetOnline(a, d int, online bool) {
	v := "0"
	if online {
		v = "1"
	}
	k.Write(fmt.Sprintf("devices/ap/card%02x/%02x.%04x/online", a, a, d), v)
}

// Unplug removes a card from the bus.
func (k *Kernel) Unplug(a int) {
	if err := os.RemoveAll(filepath.Join(k.Sys, fmt.Sprintf("devices/ap/card%02x", a))); err != nil {
		k.t.Fatal(err)
	}
}

// WantDestroyed fails t unless the next node destroyed, within 5 s, is name.
func (k *Kernel) WantDestroyed(t *testing.T, name, why string) {
	t.Helper()
	select {
	case got := <-k.destroyed:
		if got != name {
			t.Fatalf("destroyed %s, want %s", got, name)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s node %s not removed", why, name)
	}
}
