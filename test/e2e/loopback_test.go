//go:build e2e

package e2e

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every component of the dev cluster listens on loopback only (kwokctl's
// default is all interfaces).
func TestControlPlaneListensOnLoopbackOnly(t *testing.T) {
	c, _ := sharedCluster(t)
	pids, err := c.Processes()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) < 5 {
		t.Fatalf("found %d processes of the cluster, want etcd, apiserver, controller-manager, scheduler and kwok", len(pids))
	}
	inodes := map[string]int{}
	for _, pid := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = pid
			}
		}
	}
	listening := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for _, l := range listeners(t, table) {
			pid, ours := inodes[l.inode]
			if !ours {
				continue
			}
			listening++
			if !l.addr.Addr().IsLoopback() {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				t.Errorf("%s (pid %d) listens on %s, want loopback only", filepath.Base(exe), pid, l.addr)
			}
		}
	}
	if listening < 5 {
		t.Errorf("the cluster's processes hold %d listening sockets; the scan found too few to mean anything", listening)
	}
}

type listener struct {
	addr  netip.AddrPort
	inode string
}

// listeners parses the LISTEN rows of a /proc/net/tcp{,6} table.
func listeners(t *testing.T, path string) []listener {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []listener
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" { // 0A = TCP_LISTEN
			continue
		}
		hostPort := strings.SplitN(fields[1], ":", 2)
		raw, err := hex.DecodeString(hostPort[0])
		if err != nil {
			t.Fatalf("%s: bad address %q", path, fields[1])
		}
		// The kernel prints each 32-bit word in host (little-endian) order.
		for i := 0; i+4 <= len(raw); i += 4 {
			raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
		}
		addr, ok := netip.AddrFromSlice(raw)
		port, err := strconv.ParseUint(hostPort[1], 16, 16)
		if !ok || err != nil {
			t.Fatalf("%s: bad address %q", path, fields[1])
		}
		out = append(out, listener{addr: netip.AddrPortFrom(addr.Unmap(), uint16(port)), inode: fields[9]})
	}
	return out
}
