package realnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// As root: a process left in a cgroup of the node (a runc that escaped
// the shims' kill) is killed, and the cgroup removed.
func TestRemoveCgroupTreeKillsStragglers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	mounts := cgroupMounts()
	if len(mounts) == 0 {
		t.Skip("no cgroup hierarchy mounted")
	}
	dir := filepath.Join(mounts[0], "cloister-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup here: %v", err)
	}
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	t.Cleanup(func() {
		sleeper.Process.Kill()
		time.Sleep(100 * time.Millisecond)
		os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		sleeper.Process.Kill()
		os.Remove(dir)
		t.Skipf("cannot move a process into %s: %v", dir, err)
	}
	if err := removeCgroupTree(dir, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left: %v", dir, err)
	}
	select {
	case err := <-done:
		if ws, ok := sleeper.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the straggler ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		sleeper.Process.Kill()
		t.Error("the straggler still runs")
	}
}
