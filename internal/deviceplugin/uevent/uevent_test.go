package uevent

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

func TestParse(t *testing.T) {
	env := Parse([]byte("change@/devices/ap/card05/05.0012\x00ACTION=change\x00DEVPATH=/devices/ap/card05/05.0012\x00SUBSYSTEM=ap\x00ONLINE=0\x00"))
	if env["SUBSYSTEM"] != "ap" || env["ONLINE"] != "0" || env["ACTION"] != "change" {
		t.Errorf("Parse = %v", env)
	}
	if env := Parse([]byte("libudev\x00\xfe\xed\xca\xfe")); env != nil {
		t.Errorf("udev's rebroadcast parsed as a kernel uevent: %v", env)
	}
}

// TestListenSeesARealKernelUevent asks the kernel for a real uevent of
// /dev/null's device (writing "change" to its uevent file, as udevadm
// trigger does) and expects a trigger for subsystem mem only.
func TestListenSeesARealKernelUevent(t *testing.T) {
	const trigger = "/sys/devices/virtual/mem/null/uevent"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := Listen(ctx, "mem")
	if err != nil {
		testskip.Skipf(t, "kernel uevents are not available here: %v", err)
	}
	others, err := Listen(ctx, "ap")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trigger, []byte("change"), 0); err != nil {
		testskip.Skipf(t, "cannot ask the kernel for a uevent (needs root and a writable /sys): %v", err)
	}
	select {
	case <-events:
	case <-time.After(2 * time.Second):
		t.Fatal("no trigger within 2 s of a real uevent")
	}
	select {
	case <-others:
		t.Error("a mem uevent triggered the ap listener")
	case <-time.After(200 * time.Millisecond):
	}
}
