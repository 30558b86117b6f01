package realnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// daemon is a long-running process of the node (containerd, the kubelet).
// It is started detached, in a session of its own with its output in a log
// file, so it outlives the `cloister dev up` that started it; and it is
// found again by its executable's name and an argument naming this node's
// folder (Marker), never by a pid file that a reboot or a crash makes
// stale. Bin may be just the name when the daemon is only to be found.
type daemon struct {
	Bin    string
	Args   []string
	Env    []string
	Log    string
	Marker string
}

// Start runs the daemon. The caller's process reaps it if it exits first.
func (d daemon) Start() error {
	if err := os.MkdirAll(filepath.Dir(d.Log), 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(d.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(d.Bin, d.Args...)
	cmd.Env = d.Env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", filepath.Base(d.Bin), err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// Running lists the live processes of this daemon.
func (d daemon) Running() []int {
	return processes(func(argv [][]byte) bool {
		if len(argv) == 0 || filepath.Base(string(argv[0])) != filepath.Base(d.Bin) {
			return false
		}
		for _, a := range argv[1:] {
			if bytes.Contains(a, []byte(d.Marker)) {
				return true
			}
		}
		return false
	})
}

// Stop sends SIGTERM to the daemon's processes, then SIGKILL to those
// still there after grace, and waits until they are gone.
func (d daemon) Stop(grace time.Duration) error {
	return terminate(d.Running(), grace)
}

// processes lists live (not zombie) processes whose argv matches.
func processes(match func(argv [][]byte) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		if match(bytes.Split(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0})) && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// terminate ends pids: SIGTERM, SIGKILL after grace, and waits for them.
func terminate(pids []int, grace time.Duration) error {
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	if waitGone(pids, grace) == nil {
		return nil
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("killing process %d: %w", pid, err)
		}
	}
	return waitGone(pids, 10*time.Second)
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// LockFile is the name, in the tool cache, of the host-wide lock of
// real-node parts (toolchain.Lock). A host has one real node: tests that
// start containerd or a kubelet (in several packages, which go test runs
// at once) hold it, so neither removes a fixed path the other recorded as
// its own.
const LockFile = "realnode.lock"
