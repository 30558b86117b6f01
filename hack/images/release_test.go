package main

import (
	"archive/tar"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/dev/testskip"
)

// EnvReleaseImages names the folder make images wrote for PLATFORMS
// other than the host's (make test PLATFORMS=all sets it).
const EnvReleaseImages = "CLOISTER_RELEASE_IMAGES"

// What make images PLATFORMS=all wrote: every binary's index holds an
// image per platform, each of its platform's machine; the digests are
// those pinned.txt names.
func TestReleaseImages(t *testing.T) {
	dir := os.Getenv(EnvReleaseImages)
	if dir == "" {
		testskip.Skipf(t, "%s is not set: make test PLATFORMS=all builds the release images and checks them", EnvReleaseImages)
	}
	pinned, err := os.ReadFile(filepath.Join(dir, PinnedFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range image.Binaries {
		file := filepath.Join(dir, b+".tar")
		ref, digest, err := image.ReadRef(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(pinned), b+" "+ref+"@"+digest+"\n") {
			t.Errorf("%s: %s@%s is not what %s pins", b, ref, digest, PinnedFile)
		}
		unpacked := t.TempDir()
		untar(t, file, unpacked)
		p, err := layout.FromPath(unpacked)
		if err != nil {
			t.Fatal(err)
		}
		outer, _ := p.ImageIndex()
		om, _ := outer.IndexManifest()
		index, err := outer.ImageIndex(om.Manifests[0].Digest)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		m, _ := index.IndexManifest()
		if len(m.Manifests) != len(image.All) {
			t.Fatalf("%s: %d platforms, want %d", b, len(m.Manifests), len(image.All))
		}
		for i, d := range m.Manifests {
			want := image.All[i]
			if d.Platform == nil || d.Platform.Architecture != want.Architecture {
				t.Errorf("%s: manifest %d is for %+v, want %s", b, i, d.Platform, want)
				continue
			}
			img, err := index.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			machine := binaryMachine(t, img, "usr/local/bin/"+b)
			if machine != map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "s390x": elf.EM_S390}[want.Architecture] {
				t.Errorf("%s for %s holds a binary for %s", b, want, machine)
			}
		}
	}
}

// untar unpacks an OCI-layout tarball make images wrote.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
