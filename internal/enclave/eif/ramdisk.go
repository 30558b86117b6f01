package eif

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/cavaliergopher/cpio"
)

// Ramdisk builds an initramfs archive (cpio, newc) reproducibly: entries
// sorted by path, every parent folder present, owned by root, at time
// zero, numbered in order. The kernel unpacks it uncompressed.
type Ramdisk struct {
	entries map[string]entry
	size    int64
}

type entry struct {
	mode cpio.FileMode
	data []byte
	link string
}

// MaxRamdisk bounds one ramdisk: an enclave's memory holds it whole.
const MaxRamdisk = 4 << 30

// cleanPath is p inside the archive: relative, cleaned, never above its
// root.
func cleanPath(p string) (string, error) {
	c := path.Clean("/" + p)
	if c == "/" || strings.Contains(p, "\x00") {
		return "", fmt.Errorf("ramdisk: path %q names no file", p)
	}
	return c[1:], nil
}

func (r *Ramdisk) put(p string, e entry) error {
	name, err := cleanPath(p)
	if err != nil {
		return err
	}
	if r.entries == nil {
		r.entries = map[string]entry{}
	}
	if old, ok := r.entries[name]; ok && old.mode&cpio.ModeType == cpio.TypeDir && e.mode&cpio.ModeType == cpio.TypeDir {
		return nil
	}
	r.size += int64(len(e.data)) + int64(len(name)) + 112
	if r.size > MaxRamdisk {
		return fmt.Errorf("ramdisk: more than %d bytes", MaxRamdisk)
	}
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if old, ok := r.entries[dir]; ok && old.mode&cpio.ModeType != cpio.TypeDir {
			return fmt.Errorf("ramdisk: %s is inside %s, which is no folder", name, dir)
		}
		if _, ok := r.entries[dir]; !ok {
			r.entries[dir] = entry{mode: cpio.TypeDir | 0o755}
		}
	}
	r.entries[name] = e
	return nil
}

// File adds a regular file with permission bits perm (setuid and setgid
// are dropped).
func (r *Ramdisk) File(p string, perm uint32, data []byte) error {
	return r.put(p, entry{mode: cpio.TypeReg | cpio.FileMode(perm&0o1777), data: data})
}

// Dir adds a folder.
func (r *Ramdisk) Dir(p string, perm uint32) error {
	return r.put(p, entry{mode: cpio.TypeDir | cpio.FileMode(perm&0o1777)})
}

// Symlink adds a symbolic link to target (as written; the enclave's
// kernel resolves it inside the archive's root).
func (r *Ramdisk) Symlink(p, target string) error {
	if target == "" || strings.Contains(target, "\x00") {
		return fmt.Errorf("ramdisk: link %s has no target", p)
	}
	return r.put(p, entry{mode: cpio.TypeSymlink | 0o777, link: target})
}

// Bytes is the archive.
func (r *Ramdisk) Bytes() ([]byte, error) {
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	w := cpio.NewWriter(&b)
	for i, n := range names {
		e := r.entries[n]
		h := &cpio.Header{Name: n, Mode: e.mode, ModTime: time.Unix(0, 0), Inode: int64(i + 1), Links: 1}
		switch e.mode & cpio.ModeType {
		case cpio.TypeSymlink:
			h.Linkname, h.Size = e.link, int64(len(e.link))
		case cpio.TypeDir:
			h.Links = 2
		default:
			h.Size = int64(len(e.data))
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		body := e.data
		if h.Linkname != "" {
			body = []byte(e.link)
		}
		if _, err := w.Write(body); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
