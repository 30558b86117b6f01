package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cloister-cc/cloister/internal/base/proc"
)

// descendants lists every process below the given ones.
func descendants(roots []int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := proc.Parent(pid); ppid >= 0 {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// ShimSocketDir is where containerd's shims put their sockets whatever
// the runtime's own folders are.
const ShimSocketDir = "/run/containerd/s"

// listeningSockets lists the paths of the unix sockets the processes hold
// that lie in dir: their file descriptors name socket inodes, and
// /proc/net/unix maps inodes to paths.
func listeningSockets(pids []int, dir string) []string {
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		entries, _ := os.ReadDir(fds)
		for _, e := range entries {
			target, err := os.Readlink(filepath.Join(fds, e.Name()))
			if err == nil && strings.HasPrefix(target, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
			}
		}
	}
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var paths []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(s.Text())
		if len(fields) == 8 && inodes[fields[6]] && strings.HasPrefix(fields[7], dir+"/") && !slices.Contains(paths, fields[7]) {
			paths = append(paths, fields[7])
		}
	}
	return paths
}

// removeSockets deletes the socket files once nobody listens on them (a
// killed shim's socket lingers for a moment); one still served after
// timeout is an error.
func removeSockets(paths []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var alive []string
		for _, p := range paths {
			c, err := net.DialTimeout("unix", p, time.Second)
			if err == nil {
				_ = c.Close()
				alive = append(alive, p)
				continue
			}
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sockets still served: %s", strings.Join(alive, ", "))
		}
		time.Sleep(50 * time.Millisecond)
		paths = alive
	}
}

// MountsUnder lists the mount points at or below dir, deepest first.
func MountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, s.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder lazily unmounts everything at or below dir. A mount may
// show more than once (stacked, or propagated into a shared subtree) and
// go with the first unmount, so it rereads the table until nothing is left.
func unmountUnder(dir string) error {
	for pass := 0; ; pass++ {
		mounts, err := MountsUnder(dir)
		if err != nil || len(mounts) == 0 {
			return err
		}
		var failed error
		for _, m := range mounts {
			err := syscall.Unmount(m, syscall.MNT_DETACH)
			if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				failed = fmt.Errorf("unmounting %s: %w", m, err)
			}
		}
		if pass == 10 {
			if failed == nil {
				failed = fmt.Errorf("still mounted below %s: %s", dir, strings.Join(mounts, ", "))
			}
			return failed
		}
	}
}
