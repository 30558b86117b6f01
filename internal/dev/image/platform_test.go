package image

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestParsePlatforms(t *testing.T) {
	host := Host()
	for _, tc := range []struct {
		in   string
		want []Platform
		err  string
	}{
		{in: "", want: []Platform{host}},
		{in: "host", want: []Platform{host}},
		{in: "all", want: All},
		// All's order and no repeats, whatever the order given: the same
		// list gives the same index.
		{in: "linux/s390x, linux/amd64,linux/s390x", want: []Platform{{"linux", "amd64"}, {"linux", "s390x"}}},
		{in: "linux/arm64", want: []Platform{{"linux", "arm64"}}},
		{in: "linux/mips", err: `platform "linux/mips": want host, all, or a comma-separated list of linux/amd64, linux/arm64, linux/s390x`},
		{in: "s390x", err: `platform "s390x"`},
	} {
		got, err := ParsePlatforms(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if got := Host().Dir("bin"); got != "bin" {
		t.Errorf("the host's binaries are in %s, want bin", got)
	}
	other := Platform{"linux", "s390x"}
	if runtime.GOARCH == "s390x" {
		other = Platform{"linux", "amd64"}
	}
	if got := other.Dir("bin"); got != filepath.Join("bin", "linux_"+other.Architecture) {
		t.Errorf("%s's binaries are in %s", other, got)
	}
}

// An image index of the host alone, as make build and make test build
// it: one manifest with the host's platform, written and read back by its
// index digest; a binary of another machine is refused by name.
func TestHostIndex(t *testing.T) {
	spec := Spec{Name: "cloister-las", Binary: binary(t), Version: "v1"}
	index, images, err := BuildIndex(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := index.IndexManifest()
	if mt, _ := index.MediaType(); mt != "application/vnd.oci.image.index.v1+json" || len(m.Manifests) != 1 || len(images) != 1 ||
		m.Manifests[0].Platform.Architecture != runtime.GOARCH || m.Manifests[0].Platform.OS != "linux" {
		t.Fatalf("index %s %+v", mt, m.Manifests)
	}
	if d, _ := images[0].Digest(); d != m.Manifests[0].Digest {
		t.Errorf("index names %s, image is %s", m.Manifests[0].Digest, d)
	}
	file := filepath.Join(t.TempDir(), "las.tar")
	if err := WriteIndex(index, "ghcr.io/cloister-cc/cloister-las:v1", file); err != nil {
		t.Fatal(err)
	}
	ref, digest, err := ReadRef(file)
	if d, _ := index.Digest(); err != nil || ref != "ghcr.io/cloister-cc/cloister-las:v1" || digest != d.String() {
		t.Errorf("ReadRef: %s %s %v, want the index %s", ref, digest, err, d)
	}

	script := filepath.Join(t.TempDir(), "cloister-las")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := BuildIndex(Spec{Name: "cloister-las", Binary: script}, nil); err == nil || !strings.Contains(err.Error(), "is no ELF executable for "+runtime.GOARCH) {
		t.Errorf("a script as the binary: %v", err)
	}
	other := Platform{"linux", "s390x"}
	if runtime.GOARCH == "s390x" {
		other = Platform{"linux", "amd64"}
	}
	if _, err := Build(Spec{Name: "x", Binary: binary(t), Platform: other}); err == nil || !strings.Contains(err.Error(), "not for "+other.Architecture+": build it again with GOARCH="+other.Architecture) {
		t.Errorf("this machine's binary as %s's: %v", other, err)
	}
}
