// Package proc finds and stops host processes through /proc: by what their
// command line says rather than by pid files, which a crash or a reboot
// makes stale. The dev cluster's control plane and the real node's daemons
// are found and stopped with it.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// poll is how often waits look again.
const poll = 10 * time.Millisecond

// Find lists the live processes, other than this one, whose argv match
// accepts. Zombies (exited, not yet reaped) count as gone.
func Find(match func(argv [][]byte) bool) []int {
	return live(func(pid int) bool {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return err == nil && len(cmdline) > 0 && match(bytes.Split(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0}))
	})
}

// OfUser lists the live processes, other than this one, whose real user
// is uid.
func OfUser(uid uint32) []int {
	want := strconv.FormatUint(uint64(uid), 10)
	return live(func(pid int) bool {
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				return f[1] == want
			}
		}
		return false
	})
}

// live lists the processes, other than this one and zombies, match
// accepts.
func live(match func(pid int) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if match(pid) && !Zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Argv is pid's command line, nil when it cannot be read.
func Argv(pid int) []string {
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(cmdline) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
}

// WithArg lists the processes with an argument (the executable included)
// containing s.
func WithArg(s string) []int {
	return Find(func(argv [][]byte) bool {
		for _, a := range argv {
			if bytes.Contains(a, []byte(s)) {
				return true
			}
		}
		return false
	})
}

// Zombie reports whether pid has exited: gone, or a zombie its parent has
// yet to reap.
func Zombie(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// Field 3, after the parenthesised command name, is the state.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// statFields are the fields of /proc/PID/stat after the command name,
// which may contain spaces and parentheses: field 3 (state) is the first.
func statFields(pid int) ([]string, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])), nil
}

// Parent is pid's parent, or -1 when it cannot be read.
func Parent(pid int) int {
	fields, err := statFields(pid)
	if err != nil || len(fields) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return -1
	}
	return ppid
}

// CPU is the processor time pid has used, user and system (fields 14 and
// 15 of its stat, in clock ticks of 10 ms).
func CPU(pid int) (time.Duration, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// KillPending reports whether SIGKILL is pending for pid.
func KillPending(pid int) bool {
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	const sigkillBit = 1 << (syscall.SIGKILL - 1)
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64); err == nil && bits&sigkillBit != 0 {
			return true
		}
	}
	return false
}

// Exiting reports whether pid is on its way out: killed (SIGKILL pending)
// or already past releasing its memory (no command line left).
func Exiting(pid int) bool {
	if Zombie(pid) {
		return false
	}
	if cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); err != nil || len(cmdline) == 0 {
		return err == nil
	}
	return KillPending(pid)
}

// WaitSettled waits, at most timeout, until pid is either gone (or a
// zombie) or plainly alive, not in the middle of exiting.
func WaitSettled(pid int, timeout time.Duration) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline) && Exiting(pid); time.Sleep(poll) {
	}
}

// WaitGone waits until every pid has exited.
func WaitGone(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for !Zombie(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d did not exit within %s", pid, timeout)
			}
			time.Sleep(poll)
		}
	}
	return nil
}

// Terminate ends pids: SIGTERM, SIGKILL to those left after grace, and
// waits (10 s at most) for them to be gone.
func Terminate(pids []int, grace time.Duration) error {
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	if WaitGone(pids, grace) == nil {
		return nil
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing process %d: %w", pid, err)
		}
	}
	return WaitGone(pids, 10*time.Second)
}
