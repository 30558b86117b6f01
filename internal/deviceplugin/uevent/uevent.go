// Package uevent turns kernel uevents into rescan triggers. Changes the
// kernel makes in sysfs (a CryptoExpress card plugged, a queue set
// offline) raise no inotify events; the kernel announces them as uevents
// on a netlink socket, which is what udev listens to as well.
package uevent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Parse reads one uevent message: "ACTION@DEVPATH\0KEY=VALUE\0...". It
// returns nil for messages that are not kernel uevents (udev's own
// rebroadcasts start with "libudev").
func Parse(msg []byte) map[string]string {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) == 0 || !bytes.Contains(parts[0], []byte("@")) {
		return nil
	}
	env := map[string]string{}
	for _, p := range parts[1:] {
		if k, v, ok := bytes.Cut(p, []byte("=")); ok {
			env[string(k)] = string(v)
		}
	}
	return env
}

// Listen sends on the returned channel (without blocking; one pending
// signal is enough) whenever the kernel announces a device of one of the
// subsystems, until ctx ends.
func Listen(ctx context.Context, subsystems ...string) (<-chan struct{}, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("opening the kernel uevent socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("joining kernel uevents: %w", err)
	}
	// A receive timeout lets the reader notice ctx ending.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000}); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer func() { _ = unix.Close(fd) }()
		buf := make([]byte, 64<<10)
		for ctx.Err() == nil {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
					continue
				}
				time.Sleep(100 * time.Millisecond) // ENOBUFS after a burst: keep going
				continue
			}
			if env := Parse(buf[:n]); env != nil && slices.Contains(subsystems, env["SUBSYSTEM"]) {
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}
