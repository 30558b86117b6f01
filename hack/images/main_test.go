package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/hack/images/shipped"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/workload/imagepin"
	"github.com/cloister-cc/cloister/internal/workload/imagesig"
)

// fakeBinaries is a bin folder with the small pause program, built for
// this machine, under every name (this test binary is too large to pack
// ten times under the race detector).
func fakeBinaries(t *testing.T) string {
	t.Helper()
	built := t.TempDir()
	crossBuild(t, image.Host(), "github.com/cloister-cc/cloister/cmd/cloister-pause", built)
	data, err := os.ReadFile(filepath.Join(built, "cloister-pause"))
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, b := range image.Binaries {
		if err := os.WriteFile(filepath.Join(bin, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// The images are written and pushed to a real registry implementation
// (go-containerregistry's, in memory), signed, and pulled back unchanged
// with signatures that verify.
func TestBuildAndPush(t *testing.T) {
	bin := fakeBinaries(t)
	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	out := t.TempDir()
	key, err := imagesig.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := run(bin, out, "ghcr.io/cloister-cc", "v9.9.9", "abc", "src", host+"/cloister", "", key, nil); err != nil {
		t.Fatal(err)
	}
	pinned, err := os.ReadFile(filepath.Join(out, PinnedFile))
	if err != nil {
		t.Fatal(err)
	}
	// Each image's configuration, as generate's cache keeps it, offline.
	configs := &imagepin.Configs{Cache: filepath.Join(out, ConfigsFile), Offline: true}
	for _, line := range strings.Split(strings.TrimSpace(string(pinned)), "\n") {
		binary, ref, _ := strings.Cut(line, " ")
		cfg, err := configs.Config(context.Background(), ref)
		if err != nil || len(cfg.Entrypoint) != 1 || cfg.Entrypoint[0] != "/usr/local/bin/"+binary || cfg.User != "65532:65532" {
			t.Errorf("%s's configuration: %+v, %v", binary, cfg, err)
		}
	}
	for _, b := range image.Binaries {
		if _, err := os.Stat(filepath.Join(out, b+".tar")); err != nil {
			t.Error(err)
		}
		if !strings.Contains(string(pinned), b+" ghcr.io/cloister-cc/"+b+":v9.9.9@sha256:") {
			t.Errorf("%s not pinned in %s:\n%s", b, PinnedFile, pinned)
		}
		want, _, err := image.BuildIndex(image.Spec{Name: b, Binary: filepath.Join(bin, b), Files: shipped.Files[b], Version: "v9.9.9", Revision: "abc", Source: "src"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := name.NewTag(host + "/cloister/" + b + ":v9.9.9")
		got, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("pulling %s: %v", ref, err)
		}
		gd, _ := got.Digest()
		wd, _ := want.Digest()
		if gd != wd {
			t.Errorf("%s: pushed %s, built %s", b, gd, wd)
		}
		if err := imagesig.Verify(context.Background(), ref.Context().Digest(gd.String()), &key.PublicKey); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
	if err := run(t.TempDir(), out, "r", "v", "", "", "", "", nil, nil); err == nil || !strings.Contains(err.Error(), "make build first") {
		t.Errorf("missing binaries: %v", err)
	}
}

// Two builds from source, as make build and make images do them (static,
// -trimpath, version stamped), give the same image digest: built here for
// the smallest binary, in two folders, so no cache of a path can help.
func TestImagesFromSourceAreReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary twice")
	}
	var digests []string
	for range 2 {
		bin := t.TempDir()
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags",
			"-X github.com/cloister-cc/cloister/internal/base/version.Version=v9 -X github.com/cloister-cc/cloister/internal/base/version.Commit=abc",
			"-o", filepath.Join(bin, "cloister-pause"), "github.com/cloister-cc/cloister/cmd/cloister-pause")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		img, err := image.Build(image.Spec{Name: "cloister-pause", Binary: filepath.Join(bin, "cloister-pause"), Version: "v9", Revision: "abc"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds, two digests: %v", digests)
	}
}

// The operator's pinned defaults are the digests make images gives the
// same binaries.
func TestOperatorLDFlags(t *testing.T) {
	bin := fakeBinaries(t)
	flags, err := pinOperatorDefaults(bin, "ghcr.io/cloister-cc", "v1", "abc", "src", nil)
	if err != nil {
		t.Fatal(err)
	}
	built, err := image.BuildAll(bin, t.TempDir(), "ghcr.io/cloister-cc", "v1", "abc", "src", shipped.Files)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range built {
		if variable, ok := operatorDefaults[b.Name]; ok && !strings.Contains(flags, "-X main."+variable+"="+b.Pinned()) {
			t.Errorf("flags %q do not pin %s to %s", flags, variable, b.Pinned())
		}
	}
	if strings.Count(flags, "-X ") != len(operatorDefaults) {
		t.Errorf("flags %q", flags)
	}
	// cloister install deploys the operator image make images builds;
	// cloister generate injects its initializer and mesh images.
	pin, err := pinInstallImage(bin, "ghcr.io/cloister-cc", "v1", "abc", "src", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cloister-operator": "internal/operator/install.OperatorImage", "cloister-initializer": "internal/cli.InitializerImage",
		"cloister-mesh": "internal/cli.MeshImage", "cloister-enclave": "internal/cli.EnclaveImage"}
	for _, b := range built {
		if v, ok := want[b.Name]; ok && !strings.Contains(pin, "-X github.com/cloister-cc/cloister/"+v+"="+b.Pinned()) {
			t.Errorf("CLI pins %q, the image of %s is %s", pin, b.Name, b.Pinned())
		}
	}
	if strings.Count(pin, "-X ") != len(want) {
		t.Errorf("CLI pins %q", pin)
	}
}

// With -vault, the dev cluster's Vault is packed beside the images and
// pinned with them.
func TestVaultImage(t *testing.T) {
	bin := fakeBinaries(t)
	out := t.TempDir()
	if err := run(bin, out, "ghcr.io/cloister-cc", "v9.9.9", "abc", "src", "", filepath.Join(bin, "cloister-pause"), nil, nil); err != nil {
		t.Fatal(err)
	}
	pinned, err := os.ReadFile(filepath.Join(out, PinnedFile))
	if err != nil || !strings.Contains(string(pinned), VaultImage+" ghcr.io/cloister-cc/"+VaultImage+":v9.9.9@sha256:") {
		t.Fatalf("%s: %v\n%s", PinnedFile, err, pinned)
	}
	configs := &imagepin.Configs{Cache: filepath.Join(out, ConfigsFile), Offline: true}
	for _, line := range strings.Split(strings.TrimSpace(string(pinned)), "\n") {
		if name, ref, _ := strings.Cut(line, " "); name == VaultImage {
			cfg, err := configs.Config(context.Background(), ref)
			if err != nil || cfg.Entrypoint[0] != "/usr/local/bin/vault" {
				t.Errorf("the Vault image's configuration: %+v, %v", cfg, err)
			}
		}
	}
}

// Packing says it goes on every period, and stops saying so when done.
func TestHeartbeat(t *testing.T) {
	var mu sync.Mutex
	var said bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return said.Write(p)
	})
	stop := heartbeat(w, 10*time.Millisecond)
	time.Sleep(55 * time.Millisecond)
	stop()
	mu.Lock()
	n := strings.Count(said.String(), "images: still packing")
	mu.Unlock()
	if n < 2 {
		t.Fatalf("said %d times in 55 ms, every 10 ms: %q", n, said.String())
	}
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if m := strings.Count(said.String(), "images: still packing"); m > n+1 {
		t.Errorf("went on after stop: %d then %d", n, m)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
