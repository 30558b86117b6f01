package cex

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// fakeKernel is the part of s390 Linux the plugin talks to, in temp dirs:
// the AP bus in sysfs, and zcrypt's create/destroy files, which it answers
// as the kernel and udev do (a sysfs node directory with masks, a device
// node in /dev). CryptoExpress hardware cannot exist here.
type fakeKernel struct {
	t         testing.TB
	sys, dev  string
	created   atomic.Int64
	destroyed chan string // buffered; a full buffer drops names
}

func newFakeKernel(t testing.TB) *fakeKernel {
	k := &fakeKernel{t: t, sys: t.TempDir(), dev: t.TempDir(), destroyed: make(chan string, 100)}
	k.mkdir("devices/ap")
	k.mkdir("class/zcrypt")
	k.mkdir("devices/virtual/zcrypt")
	k.write("class/zcrypt/create", "")
	k.write("class/zcrypt/destroy", "")
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(filepath.Join(k.sys, "class/zcrypt")); err != nil {
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
				if _, err := os.Stat(filepath.Join(k.sys, node)); err == nil {
					continue // the kernel refuses an existing name
				}
				k.mkdir(node)
				for _, m := range []string{"apmask", "aqmask", "ioctlmask"} {
					k.write(filepath.Join(node, m), "0x"+strings.Repeat("0", 64))
				}
				if err := os.WriteFile(filepath.Join(k.dev, name), nil, 0o600); err != nil {
					t.Error(err)
				}
				k.created.Add(1)
			case "destroy":
				_ = os.RemoveAll(filepath.Join(k.sys, "devices/virtual/zcrypt", name))
				_ = os.Remove(filepath.Join(k.dev, name))
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

func (k *fakeKernel) mkdir(rel string) {
	if err := os.MkdirAll(filepath.Join(k.sys, rel), 0o755); err != nil {
		k.t.Fatal(err)
	}
}

func (k *fakeKernel) write(rel, content string) {
	if err := os.WriteFile(filepath.Join(k.sys, rel), []byte(content+"\n"), 0o644); err != nil {
		k.t.Fatal(err)
	}
}

func (k *fakeKernel) read(rel string) string {
	b, err := os.ReadFile(filepath.Join(k.sys, rel))
	if err != nil {
		k.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// card plugs in adapter a of model (CEX8P) with online queues for domains.
// Like the kernel, it fills the card before it appears on the bus.
func (k *fakeKernel) card(a int, model string, domains ...int) {
	staging := filepath.Join(k.sys, "staging")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		k.t.Fatal(err)
	}
	k.write("staging/type", model)
	k.write("staging/online", "1")
	for _, d := range domains {
		q := fmt.Sprintf("staging/%02x.%04x", a, d)
		k.mkdir(q)
		k.write(q+"/online", "1")
	}
	if err := os.Rename(staging, filepath.Join(k.sys, fmt.Sprintf("devices/ap/card%02x", a))); err != nil {
		k.t.Fatal(err)
	}
}

// queue adds a domain to a plugged card.
func (k *fakeKernel) queue(a, d int) {
	q := fmt.Sprintf("devices/ap/card%02x/%02x.%04x", a, a, d)
	k.mkdir(q)
	k.write(q+"/online", "1")
}

func (k *fakeKernel) setOnline(a, d int, online bool) {
	v := "0"
	if online {
		v = "1"
	}
	k.write(fmt.Sprintf("devices/ap/card%02x/%02x.%04x/online", a, a, d), v)
}

func (k *fakeKernel) unplug(a int) {
	if err := os.RemoveAll(filepath.Join(k.sys, fmt.Sprintf("devices/ap/card%02x", a))); err != nil {
		k.t.Fatal(err)
	}
}

// wantDestroyed fails t unless the next node destroyed, within 5 s, is name.
func (k *fakeKernel) wantDestroyed(t *testing.T, name, why string) {
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
