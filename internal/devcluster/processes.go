package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Processes lists the PIDs of running processes that belong to the cluster:
// every component kwokctl starts names a file in the cluster folder on its
// command line (etcd's data dir, the apiserver's certificates, kwok's
// kubeconfig), so the command lines tell, without trusting pid files.
func (c *Cluster) Processes() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	marker := []byte(c.Dir() + string(filepath.Separator))
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, marker) || isZombie(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// clearStalePIDFiles removes kwokctl pid files that name no live process
// of this cluster. kwokctl trusts a pid file if the pid answers signal 0,
// which a killed-but-unreaped component or an unrelated process that reused
// the pid after a reboot both do; it would then never restart the component.
func (c *Cluster) clearStalePIDFiles() error {
	files, err := filepath.Glob(filepath.Join(c.Dir(), "pids", "*.pid"))
	if err != nil {
		return err
	}
	live, err := c.Processes()
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err == nil && slices.Contains(live, pid) {
			continue
		}
		if err == nil {
			// A killed component that is still exiting holds its port and
			// data lock; its successor would fail to start.
			waitExited(pid, 10*time.Second)
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing stale pid file: %w", err)
		}
	}
	return nil
}

// waitExited waits until pid is gone or a zombie, at most timeout. A live
// process has a command line; an exiting one has none left.
func waitExited(pid int, timeout time.Duration) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(pollInterval) {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(cmdline) > 0 || isZombie(pid) {
			return // gone, zombie, or a live process that reused the pid
		}
	}
}

func isZombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // gone
	}
	// Field 3, after the parenthesised command name, is the state.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z'
	}
	return false
}

// killRemaining stops processes of the cluster that kwokctl left running:
// SIGTERM, then SIGKILL after a grace period. It fails if any survive.
func (c *Cluster) killRemaining(ctx context.Context) error {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		pids, err := c.Processes()
		if err != nil || len(pids) == 0 {
			return err
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("stopping process %d of cluster %q: %w", pid, c.Name, err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if pids, err = c.Processes(); err != nil || len(pids) == 0 {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pollInterval):
			}
		}
	}
	pids, err := c.Processes()
	if err == nil && len(pids) > 0 {
		err = fmt.Errorf("processes %v of cluster %q survived SIGKILL", pids, c.Name)
	}
	return err
}
