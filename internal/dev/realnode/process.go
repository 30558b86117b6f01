package realnode

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cloister-cc/cloister/internal/base/proc"
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
	// Restart runs the daemon under a supervisor that starts it again a
	// second after it exits, as systemd's Restart=always does on a real
	// node: the confidential runtime's node installer restarts containerd
	// by stopping it.
	Restart bool
}

// superviseScript is the supervisor: a shell loop, present on any host,
// whose arguments are the marker (a file: the loop ends once it is gone,
// so a node removed under it leaves no loop behind) and the daemon's
// command line. It is found by the marker.
const superviseScript = `marker=$1; shift; while [ -e "$marker" ]; do "$@"; sleep 1; done`

// Start runs the daemon. The caller's process reaps it if it exits first.
func (d daemon) Start() error {
	if err := os.MkdirAll(filepath.Dir(d.Log), 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(d.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command(d.Bin, d.Args...)
	if d.Restart {
		cmd = exec.Command("/bin/sh", append([]string{"-c", superviseScript, "cloister-supervise", d.Marker, d.Bin}, d.Args...)...)
	}
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
	return proc.Find(func(argv [][]byte) bool {
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

// alive says whether the daemon runs, or its supervisor does: one that
// is about to start it (a shell's fork and exec take a moment after
// Start) or to start it again.
func (d daemon) alive() bool { return len(d.Running()) > 0 || len(d.supervisors()) > 0 }

// supervisors lists the live supervisors of this daemon.
func (d daemon) supervisors() []int {
	return proc.Find(func(argv [][]byte) bool {
		return len(argv) > 5 && string(argv[1]) == "-c" && string(argv[2]) == superviseScript &&
			string(argv[4]) == d.Marker && filepath.Base(string(argv[5])) == filepath.Base(d.Bin)
	})
}

// Stop sends SIGTERM to the daemon's processes (its supervisor first, so
// it does not start it again), then SIGKILL to those still there after
// grace, and waits until they are gone.
func (d daemon) Stop(grace time.Duration) error {
	if err := proc.Terminate(d.supervisors(), grace); err != nil {
		return err
	}
	return proc.Terminate(d.Running(), grace)
}

// LockFile is the name, in the tool cache, of the host-wide lock of
// real-node parts (toolchain.Lock). A host has one real node: tests that
// start containerd or a kubelet (in several packages, which go test runs
// at once) hold it, so neither removes a fixed path the other recorded as
// its own.
const LockFile = "realnode.lock"
