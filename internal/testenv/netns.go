package testenv

import (
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// NetNS is a new network namespace the test made itself, closed when the
// test ends; without root the test skips.
func NetNS(t *testing.T) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // enters it
	if err != nil {
		t.Skipf("no new network namespace: %v", err)
	}
	if err := netns.Set(orig); err != nil {
		panic(err) // a thread left in the wrong namespace
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// InNetNS runs f with the calling thread in ns: sockets f opens are ns's.
func InNetNS(t *testing.T, ns netns.NsHandle, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // a thread left in the wrong namespace
		}
	}()
	f()
}
