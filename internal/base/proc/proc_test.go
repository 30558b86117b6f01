package proc

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A real child process: found by its arguments, its parent read, ended by
// Terminate even when it ignores SIGTERM.
func TestFindAndTerminate(t *testing.T) {
	marker := "proc-test-" + strconv.Itoa(os.Getpid())
	// The shell ignores SIGTERM, so only the SIGKILL after grace ends it.
	cmd := exec.Command("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done", marker)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil { // the trap is set
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The shell's forks copy its argv for a moment before they exec.
	if pids := WithArg(marker); !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("WithArg(%q) = %v, want %d among them", marker, pids, cmd.Process.Pid)
	}
	if argv := Argv(cmd.Process.Pid); len(argv) != 4 || argv[0] != "sh" || argv[3] != marker {
		t.Errorf("Argv = %q, want sh -c SCRIPT %s", argv, marker)
	}
	pids := []int{cmd.Process.Pid}
	if Zombie(cmd.Process.Pid) || Exiting(cmd.Process.Pid) {
		t.Error("a running process taken for an exited or exiting one")
	}
	if p := Parent(cmd.Process.Pid); p != os.Getpid() {
		t.Errorf("Parent = %d, want %d", p, os.Getpid())
	}
	start := time.Now()
	if err := Terminate(pids, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Error("a process ignoring SIGTERM was gone before the grace ended")
	}
	if !Zombie(cmd.Process.Pid) || slices.Contains(WithArg(marker), cmd.Process.Pid) {
		t.Error("process still there after Terminate")
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err == nil && !Zombie(cmd.Process.Pid) {
		t.Error("signal 0 still reaches a live process")
	}
}

// CPU grows while a process computes.
func TestCPU(t *testing.T) {
	before, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(100 * time.Millisecond); time.Now().Before(deadline); {
	}
	after, err := CPU(os.Getpid())
	if err != nil || after <= before {
		t.Errorf("CPU %s -> %s (%v)", before, after, err)
	}
	if _, err := CPU(1 << 30); err == nil {
		t.Error("a pid that does not exist has CPU")
	}
}

// OfUser lists a child of this process's user, never this process, and
// nothing of a user no process runs as.
func TestOfUser(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	mine := OfUser(uint32(os.Getuid())) //nolint:gosec // a uid
	if !slices.Contains(mine, cmd.Process.Pid) || slices.Contains(mine, os.Getpid()) {
		t.Errorf("processes of uid %d: %v, want the child %d and not this one", os.Getuid(), mine, cmd.Process.Pid)
	}
	if nobody := OfUser(4000000001); len(nobody) != 0 {
		t.Errorf("processes of an unused uid: %v", nobody)
	}
}
