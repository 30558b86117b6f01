package realnode

import (
	"bufio"
	"encoding/json"
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
)

// Places outside the node's folder that its parts write to whatever they
// are told. Each part records which of its paths it finds missing when it
// first starts (recordMissing) and removes exactly those when it stops
// (removeRecorded).
var (
	// KubeletPaths: the device-plugin folder and container log links.
	KubeletPaths = []string{"/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/var/log/containers"}
	// RuntimePaths: the shims' sockets, CRI's fifos, the CNI result cache.
	RuntimePaths = []string{"/run/containerd", "/run/containerd/s", "/run/containerd/fifo", "/var/lib/cni", "/var/lib/cni/results"}
)

// recordMissing writes to file which of paths do not exist, unless file
// already exists: the record of the first start is the one that counts.
func recordMissing(file string, paths []string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	missing := []string{}
	for _, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, p)
		}
	}
	data, err := json.MarshalIndent(missing, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o600)
}

// removeRecorded removes the paths recordMissing wrote to file; no file,
// nothing to remove.
func removeRecorded(file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var paths []string
	if err := json.Unmarshal(data, &paths); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	return removeCreated(paths)
}

// CgroupTrees are the cgroups named name in every mounted hierarchy.
func CgroupTrees(name string) []string {
	var out []string
	for _, m := range cgroupMounts() {
		out = append(out, filepath.Join(m, name))
	}
	return out
}

// cgroupMounts lists the mount points of cgroup v1 and v2 hierarchies.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ... mount-point ... - fstype source options
		pre, post, ok := strings.Cut(s.Text(), " - ")
		fields, fs := strings.Fields(pre), strings.Fields(post)
		if ok && len(fields) >= 5 && len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") {
			out = append(out, unescape(fields[4]))
		}
	}
	return out
}

func inCgroupFS(path string) bool {
	for _, m := range cgroupMounts() {
		if strings.HasPrefix(path, m+"/") {
			return true
		}
	}
	return false
}

// removeCreated removes paths, deepest first: cgroup trees by rmdir
// (their files are the kernel's), others after unmounting what is mounted
// below them.
func removeCreated(paths []string) error {
	paths = slices.Clone(paths)
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	var errs []error
	for _, p := range paths {
		if inCgroupFS(p) {
			if err := removeCgroupTree(p, 5*time.Second); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		// Made by this node, but since used by someone else too (a
		// containerd or kubelet installed later): theirs now.
		if servedSocketBelow(p) {
			continue
		}
		if err := unmountUnder(p); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// servedSocketBelow reports whether a unix socket at or below dir has a
// listener. Called once the node's own processes are gone.
func servedSocketBelow(dir string) bool {
	served := false
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || served || d.Type()&os.ModeSocket == 0 {
			return nil
		}
		if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
			_ = c.Close()
			served = true
		}
		return nil
	})
	return served
}

// removeEntriesIn deletes what the node left in a fixed folder that
// existed before it: the entries match says are its own.
func removeEntriesIn(dir string, match func(name, linkTarget string) bool) error {
	entries, _ := os.ReadDir(dir)
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		target, _ := os.Readlink(p)
		if match(e.Name(), target) {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup and its descendants, deepest first. A
// cgroup whose last process has just been killed may stay busy for a
// moment, so it retries until timeout.
func removeCgroupTree(root string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var dirs []string
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return filepath.SkipDir
				}
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		// A process can escape the shims' kill: one runc was starting
		// for a pod at that moment, not yet a shim's child. The cgroup is
		// the node's, so whatever is still in it is the node's too.
		for _, d := range dirs {
			killProcsOf(d)
		}
		var busy error
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				busy = fmt.Errorf("removing cgroup %s: %w", dirs[i], err)
			}
		}
		if busy == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return busy
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killProcsOf sends SIGKILL to the processes in cgroup dir (not this one).
func killProcsOf(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
