package cluster

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

	"github.com/cloister-cc/cloister/internal/base/proc"
)

// Processes lists the PIDs of running processes that belong to the cluster:
// kwokctl runs every component from the cluster's own bin folder, so their
// executables tell, without trusting pid files (and without matching an
// editor or `tail -f` that merely has a file of the cluster open).
func (c *Cluster) Processes() ([]int, error) {
	if _, err := os.Stat("/proc/self"); err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	binDir := []byte(filepath.Join(c.Dir(), "bin") + string(filepath.Separator))
	var pids []int
	for _, pid := range proc.Find(func(argv [][]byte) bool { return bytes.HasPrefix(argv[0], binDir) }) {
		if !proc.KillPending(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// pidFiles maps each component kwokctl started to the pid it recorded.
func (c *Cluster) pidFiles() (map[string]int, error) {
	files, err := filepath.Glob(filepath.Join(c.Dir(), "pids", "*.pid"))
	if err != nil {
		return nil, err
	}
	pids := make(map[string]int, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			pid = -1 // unreadable: never a live process
		}
		pids[f] = pid
	}
	return pids, nil
}

// clearStalePIDFiles removes kwokctl pid files that name no live process
// of this cluster, and returns the components they were for. kwokctl trusts
// a pid file if the pid answers signal 0, which a killed-but-unreaped
// component or an unrelated process that reused the pid after a reboot both
// do; it would then never restart the component.
func (c *Cluster) clearStalePIDFiles() ([]string, error) {
	files, err := c.pidFiles()
	if err != nil {
		return nil, err
	}
	// A killed component that is still exiting holds its port and data
	// lock; its successor would fail to start.
	for _, pid := range files {
		proc.WaitSettled(pid, 10*time.Second)
	}
	live, err := c.Processes()
	if err != nil {
		return nil, err
	}
	var stale []string
	for f, pid := range files {
		if slices.Contains(live, pid) {
			continue
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing stale pid file: %w", err)
		}
		stale = append(stale, strings.TrimSuffix(filepath.Base(f), ".pid"))
	}
	slices.Sort(stale)
	return stale, nil
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
