package eif

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
)

func TestRamdiskIsSortedCompleteAndReproducible(t *testing.T) {
	build := func(order []int) []byte {
		var r Ramdisk
		add := []func() error{
			func() error { return r.File("rootfs/usr/local/bin/cloister-enclave", 0o4755, []byte("orchestrator")) },
			func() error { return r.File("../../init", 0o755, []byte("init")) },
			func() error { return r.Symlink("rootfs/bin", "usr/bin") },
			func() error { return r.Dir("rootfs/tmp", 0o1777) },
			func() error { return r.File("cmd", 0o644, []byte("/usr/local/bin/cloister-enclave\n")) },
		}
		for _, i := range order {
			if err := add[i](); err != nil {
				t.Fatal(err)
			}
		}
		data, err := r.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	a, b := build([]int{0, 1, 2, 3, 4}), build([]int{4, 3, 2, 1, 0})
	if !bytes.Equal(a, b) {
		t.Error("the order files were added in changed the archive")
	}
	var names []string
	modes := map[string]cpio.FileMode{}
	rd := cpio.NewReader(bytes.NewReader(a))
	for {
		h, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		modes[h.Name] = h.Mode
		if h.Uid != 0 || h.Guid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d, time %s", h.Name, h.Uid, h.Guid, h.ModTime)
		}
		if h.Name == "rootfs/bin" && h.Linkname != "usr/bin" {
			t.Errorf("link to %q", h.Linkname)
		}
	}
	want := []string{"cmd", "init", "rootfs", "rootfs/bin", "rootfs/tmp", "rootfs/usr", "rootfs/usr/local", "rootfs/usr/local/bin", "rootfs/usr/local/bin/cloister-enclave"}
	if !slices.Equal(names, want) {
		t.Errorf("entries %v, want %v", names, want)
	}
	if modes["rootfs/usr/local/bin/cloister-enclave"] != cpio.TypeReg|0o755 || modes["rootfs/tmp"] != cpio.TypeDir|0o1777 {
		t.Errorf("modes %v: setuid must go, the sticky folder stay", modes)
	}
	// GNU cpio, where installed, reads it as a kernel would: newc.
	if _, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command("cpio", "-t", "--quiet")
		cmd.Stdin = bytes.NewReader(a)
		out, err := cmd.Output()
		if err != nil || strings.Join(strings.Fields(string(out)), " ") != strings.Join(want, " ") {
			t.Errorf("cpio -t: %q, %v", out, err)
		}
	}

	var r Ramdisk
	if err := r.File("a", 0o644, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.File("a/b", 0o644, nil); err == nil {
		t.Error("a file inside a file")
	}
	if err := r.File("/", 0o644, nil); err == nil {
		t.Error("the root as a file")
	}
	if err := r.Symlink("l", ""); err == nil {
		t.Error("a link to nothing")
	}
}
