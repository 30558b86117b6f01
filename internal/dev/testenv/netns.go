package testenv

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

// NetNS is a new network namespace the test made itself, closed when the
// test ends; without root the test skips.
func NetNS(t *testing.T) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		testskip.Skipf(t, "network namespaces need root")
	}
	ns, err := NewNetNS()
	if err != nil {
		testskip.Skipf(t, "no new network namespace: %v", err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	return ns
}

// NewNetNS makes a network namespace, which lives while its handle is open.
func NewNetNS() (netns.NsHandle, error) {
	var ns netns.NsHandle
	err := Enter(netns.None(), func() error {
		var err error
		ns, err = netns.New() // enters it; Enter leaves it
		return err
	})
	return ns, err
}

// InNetNS runs f with the calling thread in ns: sockets f opens are ns's.
func InNetNS(t *testing.T, ns netns.NsHandle, f func()) {
	t.Helper()
	if err := Enter(ns, func() error { f(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// Enter runs f with the calling thread in ns (None: stay where it is) and
// brings the thread back to its own namespace after.
func Enter(ns netns.NsHandle, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer func() { _ = orig.Close() }()
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // a thread left in the wrong namespace
		}
	}()
	if ns.IsOpen() {
		if err := netns.Set(ns); err != nil {
			return err
		}
	}
	return f()
}
