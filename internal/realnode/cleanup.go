package realnode

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processesWith lists the processes whose command line mentions s.
func processesWith(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// descendants lists every process below the given ones.
func descendants(roots []int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name may contain spaces and parentheses: the parent
		// pid is the second field after the last ')'.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
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

// waitGone waits until the processes have exited (gone, or zombies whose
// parent has yet to reap them).
func waitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for {
			stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
			if err != nil {
				break
			}
			if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d did not exit after SIGKILL", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// ShimSocketDir is where containerd's shims put their sockets whatever
// the runtime's own folders are.
const ShimSocketDir = "/run/containerd/s"

// shimSockets lists the sockets in ShimSocketDir.
func shimSockets() map[string]bool {
	entries, _ := os.ReadDir(ShimSocketDir)
	out := map[string]bool{}
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out
}

// removeShimSockets deletes the shim sockets that appeared since
// before once nobody listens on them (a shim's socket lingers briefly
// after its SIGKILL); one still served after timeout is an error.
func removeShimSockets(before map[string]bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var alive []string
		for name := range shimSockets() {
			if before[name] {
				continue // another containerd's, or one from before us
			}
			p := filepath.Join(ShimSocketDir, name)
			c, err := net.DialTimeout("unix", p, time.Second)
			if err == nil {
				c.Close()
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
			return fmt.Errorf("shim sockets still served: %s", strings.Join(alive, ", "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// MountsUnder lists the mount points at or below dir, deepest first.
func MountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
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

func unmountUnder(dir string) error {
	mounts, err := MountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting %s: %w", m, err)
		}
	}
	return nil
}
