package realnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

// As root: a process left in a cgroup of the node (a runc that escaped
// the shims' kill) is killed, and the cgroup removed.
func TestRemoveCgroupTreeKillsStragglers(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skipf(t, "needs root to make cgroups")
	}
	mounts := cgroupMounts()
	if len(mounts) == 0 {
		testskip.Skipf(t, "no cgroup hierarchy mounted")
	}
	dir := filepath.Join(mounts[0], "cloister-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		testskip.Skipf(t, "cannot make a cgroup here: %v", err)
	}
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	t.Cleanup(func() {
		_ = sleeper.Process.Kill() // it may be gone already, as the test wants
		time.Sleep(100 * time.Millisecond)
		_ = os.Remove(dir) // removeCgroupTree removed it, unless the test failed first
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		_ = sleeper.Process.Kill() // it may be gone already, as the test wants
		_ = os.Remove(dir)
		testskip.Skipf(t, "cannot move a process into %s: %v", dir, err)
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
		_ = sleeper.Process.Kill() // it may be gone already, as the test wants
		t.Error("the straggler still runs")
	}
}
