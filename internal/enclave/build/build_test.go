package build

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/enclave/eif"
)

// fakeELF is the smallest ELF header of machine: what the architecture
// check reads.
func fakeELF(machine elf.Machine) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_EXEC))
	binary.LittleEndian.PutUint16(h[18:], uint16(machine))
	binary.LittleEndian.PutUint32(h[20:], 1)
	binary.LittleEndian.PutUint16(h[52:], 64)
	return h
}

type file struct {
	name, link string
	typ        byte
	data       string
}

func layer(t *testing.T, files ...file) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Mode: 0o755, Size: int64(len(f.data)), Linkname: f.link}
		if f.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if f.typ == tar.TypeReg {
			_, _ = tw.Write([]byte(f.data))
		}
	}
	_ = tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// pushPlugin pushes an index of an amd64 and an arm64 image of a plugin,
// each of two layers (the second removing a file of the first), and
// returns its reference by digest.
func pushPlugin(t *testing.T, host, repo, content string) string {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := mutate.AppendLayers(empty.Image,
			layer(t, file{name: "usr/", typ: tar.TypeDir}, file{name: "usr/bin/app", typ: tar.TypeReg, data: content + " for " + arch},
				file{name: "usr/bin/gone", typ: tar.TypeReg, data: "removed by the next layer"}, file{name: "dev/null", typ: tar.TypeChar}),
			layer(t, file{name: "usr/bin/.wh.gone", typ: tar.TypeReg}, file{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
				file{name: "usr/bin/app2", typ: tar.TypeLink, link: "usr/bin/app"}))
		if err != nil {
			t.Fatal(err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	tag, err := name.NewTag(host + "/" + repo + ":v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(tag, idx); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	return tag.Context().Digest(d.String()).String()
}

// testManifestKey is an owner's manifest key (PEM).
var testManifestKey = func() []byte {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	s, err := keyfile.PublicPEM(&k.PublicKey)
	if err != nil {
		panic(err)
	}
	return []byte(s)
}()

func inputs(arch string, machine elf.Machine, plugins ...Plugin) Inputs {
	return Inputs{Kernel: []byte("bzImage"), Init: []byte("init"), NSM: []byte("nsm.ko"), Orchestrator: fakeELF(machine), Arch: arch,
		Plugins: plugins, Name: "app", Version: "v1", Fetch: Remote(), ManifestKey: testManifestKey}
}

// ramdiskFiles lists an archive's regular files and links with their
// contents.
func ramdiskFiles(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	r := cpio.NewReader(bytes.NewReader(data))
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r)
		switch h.Mode & cpio.ModeType {
		case cpio.TypeSymlink:
			out[h.Name] = "-> " + h.Linkname
		case cpio.TypeReg:
			out[h.Name] = string(body)
		}
	}
}

func TestBuildFromTheRegistryIsReproducible(t *testing.T) {
	host := testenv.Registry(t, nil)
	web := pushPlugin(t, host, "web", "web server")
	ctx := context.Background()

	write := func(in Inputs) ([]byte, eif.PCRs, *eif.Image) {
		t.Helper()
		img, err := Build(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		pcrs, err := img.Write(&b)
		if err != nil {
			t.Fatal(err)
		}
		return b.Bytes(), pcrs, img
	}
	one, pcrs, img := write(inputs("amd64", elf.EM_X86_64, Plugin{"web", web}))
	two, _, _ := write(inputs("amd64", elf.EM_X86_64, Plugin{"web", web}))
	if !bytes.Equal(one, two) {
		t.Fatal("two builds of the same inputs differ")
	}
	back, err := eif.Parse(one)
	if err != nil || eif.Measure(back) != pcrs || back.ARM64 {
		t.Fatalf("read back: %v", err)
	}
	if boot := ramdiskFiles(t, img.Ramdisks[0]); boot["init"] != "init" || boot["nsm.ko"] != "nsm.ko" || len(boot) != 2 {
		t.Errorf("boot ramdisk %v", boot)
	}
	app := ramdiskFiles(t, img.Ramdisks[1])
	for path, want := range map[string]string{
		"cmd":                                   OrchestratorPath + "\norchestrator\n--manifest-key\n" + ManifestKeyPath + "\n",
		"rootfs" + ManifestKeyPath:              string(testManifestKey),
		"rootfs/plugins/web/usr/bin/app":        "web server for amd64",
		"rootfs/plugins/web/usr/bin/app2":       "web server for amd64",
		"rootfs/plugins/web/bin":                "-> usr/bin",
		"rootfs/usr/local/bin/cloister-enclave": string(fakeELF(elf.EM_X86_64)),
	} {
		if app[path] != want {
			t.Errorf("%s: %q, want %q", path, app[path], want)
		}
	}
	// Without the owner's key no image is made: its enclave would take
	// any manifest the host sends.
	noKey := inputs("amd64", elf.EM_X86_64)
	noKey.ManifestKey = nil
	if _, err := Build(context.Background(), noKey); err == nil || !strings.Contains(err.Error(), "spec.manifestKey") {
		t.Errorf("an image without a manifest key: %v", err)
	}
	for _, gone := range []string{"rootfs/plugins/web/usr/bin/gone", "rootfs/plugins/web/usr/bin/.wh.gone", "rootfs/plugins/web/dev/null"} {
		if _, ok := app[gone]; ok {
			t.Errorf("%s is in the enclave", gone)
		}
	}

	// Another plugin image moves PCR0 and PCR2, never PCR1 (AWS's boot
	// files and the command line); arm64 takes the arm64 images.
	other := pushPlugin(t, host, "web", "web server 2")
	_, changed, _ := write(inputs("amd64", elf.EM_X86_64, Plugin{"web", other}))
	if changed.PCR1 != pcrs.PCR1 || changed.PCR0 == pcrs.PCR0 || changed.PCR2 == pcrs.PCR2 {
		t.Error("a new plugin image must change PCR0 and PCR2 and leave PCR1")
	}
	armFile, _, arm := write(inputs("arm64", elf.EM_AARCH64, Plugin{"web", web}))
	if a := ramdiskFiles(t, arm.Ramdisks[1]); a["rootfs/plugins/web/usr/bin/app"] != "web server for arm64" || armFile[7] != eif.FlagARM64 {
		t.Errorf("arm64 image: %q, flags %d", a["rootfs/plugins/web/usr/bin/app"], armFile[7])
	}

	for _, tc := range []struct {
		name string
		in   Inputs
		want string
	}{
		{"tag", inputs("amd64", elf.EM_X86_64, Plugin{"web", host + "/web:v1"}), "name it by digest"},
		{"orchestrator", inputs("amd64", elf.EM_AARCH64), "the orchestrator is built for EM_AARCH64, not for amd64"},
		{"arch", inputs("s390x", elf.EM_S390), "Nitro Enclaves run on amd64 and arm64"},
		{"missing", inputs("amd64", elf.EM_X86_64, Plugin{"web", host + "/nothing@sha256:" + strings.Repeat("0", 64)}), "plugin web: fetching"},
		{"too big", func() Inputs {
			in := inputs("amd64", elf.EM_X86_64, Plugin{"web", web})
			in.MaxPluginBytes = 100
			return in
		}(), "exceed 100 bytes"},
		{"no init", func() Inputs { in := inputs("amd64", elf.EM_X86_64); in.Init = nil; return in }(), "init is empty"},
	} {
		if _, err := Build(ctx, tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
