package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cloister-cc/cloister/internal/dev/image"
)

// crossBuild compiles pkg for p into dir, as make build does.
func crossBuild(t *testing.T, p image.Platform, pkg, dir string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+"/", pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s for %s: %v\n%s", pkg, p, err, out)
	}
}

// With every platform, each binary's index holds an amd64, an arm64 and
// an s390x image, each holding an executable of its platform's machine;
// two builds into clean folders give the same index digests; and a stale
// folder of another platform's binaries is refused rather than shipped.
// Every binary here is the small pause program, built for each platform:
// make test PLATFORMS=all checks the real binaries (TestReleaseImages).
func TestEveryPlatform(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles for two platforms")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("lays out the other platforms' folders as an amd64 host's")
	}
	bin := t.TempDir()
	for _, p := range image.All {
		dir := p.Dir(bin)
		crossBuild(t, p, "github.com/cloister-cc/cloister/cmd/cloister-pause", dir)
		pause, err := os.ReadFile(filepath.Join(dir, "cloister-pause"))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range image.Binaries {
			if err := os.WriteFile(filepath.Join(dir, b), pause, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	var digests [2]map[string]string
	for i := range digests {
		out := t.TempDir()
		if err := run(bin, out, "ghcr.io/cloister-cc", "v1", "abc", "src", "", "", nil, image.All); err != nil {
			t.Fatal(err)
		}
		digests[i] = map[string]string{}
		for _, b := range image.Binaries {
			ref, digest, err := image.ReadRef(filepath.Join(out, b+".tar"))
			if err != nil || ref != "ghcr.io/cloister-cc/"+b+":v1" {
				t.Fatalf("%s: %s, %v", b, ref, err)
			}
			digests[i][b] = digest
		}
	}
	for b, d := range digests[0] {
		if digests[1][b] != d {
			t.Errorf("%s: two builds give %s and %s", b, d, digests[1][b])
		}
	}

	index, _, err := image.BuildIndex(image.Spec{Name: "cloister-device-plugin", Binary: filepath.Join(bin, "cloister-device-plugin"), Version: "v1", Revision: "abc", Source: "src"}, image.All)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := index.Digest(); d.String() != digests[0]["cloister-device-plugin"] {
		t.Errorf("in memory %s, in the tarball %s", d, digests[0]["cloister-device-plugin"])
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != len(image.All) {
		t.Fatalf("%d manifests, want %d", len(manifest.Manifests), len(image.All))
	}
	for i, m := range manifest.Manifests {
		if m.Platform == nil || m.Platform.OS != image.All[i].OS || m.Platform.Architecture != image.All[i].Architecture {
			t.Errorf("manifest %d has platform %+v, want %s", i, m.Platform, image.All[i])
		}
		img, err := index.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := img.ConfigFile()
		if cfg.Architecture != image.All[i].Architecture {
			t.Errorf("%s image's configuration says %s", image.All[i], cfg.Architecture)
		}
		machine := binaryMachine(t, img, "usr/local/bin/cloister-device-plugin")
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "s390x": elf.EM_S390}[image.All[i].Architecture]
		if machine != want {
			t.Errorf("the %s image's device plugin is built for %s", image.All[i], machine)
		}
	}

	// An amd64 binary left in the s390x folder is refused, by name.
	stale := image.All[2].Dir(bin)
	if err := os.WriteFile(filepath.Join(stale, "cloister-las"), mustRead(t, filepath.Join(bin, "cloister-las")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := run(bin, t.TempDir(), "ghcr.io/cloister-cc", "v1", "abc", "src", "", "", nil, image.All); err == nil || !bytes.Contains([]byte(err.Error()), []byte("not for s390x")) {
		t.Errorf("an amd64 binary in the s390x image: %v", err)
	}
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// binaryMachine is the ELF machine of file in img's only layer, read
// from its header alone: the layer is decompressed no further than that.
func binaryMachine(t *testing.T, img v1.Image, file string) elf.Machine {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the image: %v", file, err)
		}
		if h.Name != file {
			continue
		}
		var ident [20]byte
		if _, err := io.ReadFull(tr, ident[:]); err != nil || string(ident[:4]) != elf.ELFMAG {
			t.Fatalf("%s is no ELF executable: %v", file, err)
		}
		order := binary.ByteOrder(binary.LittleEndian)
		if elf.Data(ident[elf.EI_DATA]) == elf.ELFDATA2MSB {
			order = binary.BigEndian
		}
		return elf.Machine(order.Uint16(ident[18:]))
	}
}
