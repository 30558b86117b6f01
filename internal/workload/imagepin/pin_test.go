package imagepin

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// requests records what a registry was asked.
type requests struct {
	mu    sync.Mutex
	paths []string
}

func (r *requests) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.paths = append(r.paths, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	})
}

func (r *requests) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.paths...)
}

// pushed serves a registry with one image at shop/web:v1 and returns the
// image's tag and digest.
func pushed(t *testing.T, rec *requests) (image, digest string) {
	t.Helper()
	host := testenv.Registry(t, rec.wrap)
	ref := testenv.PushRandom(t, host, "shop/web")
	return host + "/shop/web:v1", ref.DigestStr()
}

func TestResolveReadsOnlyTheManifest(t *testing.T) {
	rec := &requests{}
	image, digest := pushed(t, rec)
	before := len(rec.list())
	cache := filepath.Join(t.TempDir(), "digests.json")
	p := &Pinner{Cache: cache}
	got, err := p.Resolve(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(image, ":v1") + "@" + digest; got != want {
		t.Errorf("pinned %q, want %q", got, want)
	}
	for _, r := range rec.list()[before:] {
		if strings.Contains(r, "/blobs/") {
			t.Errorf("resolving read a blob: %s (all: %v)", r, rec.list()[before:])
		}
	}
	if err := p.Save(); err != nil {
		t.Fatal(err)
	}

	// From the cache, even offline, no registry is asked.
	asked := len(rec.list())
	again := &Pinner{Cache: cache, Offline: true}
	got2, err := again.Resolve(context.Background(), image)
	if err != nil || got2 != got {
		t.Fatalf("from the cache: %q, %v", got2, err)
	}
	if n := len(rec.list()); n != asked {
		t.Errorf("the cache still asked the registry: %v", rec.list()[asked:])
	}
}

func TestOfflineRefusesTags(t *testing.T) {
	p := &Pinner{Offline: true}
	_, err := p.Resolve(context.Background(), "nginx:1.27")
	if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), `"nginx:1.27"`) {
		t.Fatalf("error %v", err)
	}
	pinned := "nginx@sha256:" + strings.Repeat("a", 64)
	if got, err := p.Resolve(context.Background(), pinned); err != nil || got != pinned {
		t.Fatalf("a digest offline: %q, %v", got, err)
	}
}

func TestUnknownTagNamesTheImage(t *testing.T) {
	rec := &requests{}
	image, _ := pushed(t, rec)
	missing := strings.Replace(image, ":v1", ":v9", 1)
	_, err := (&Pinner{}).Resolve(context.Background(), missing)
	if err == nil || !strings.Contains(err.Error(), `"`+missing+`": reading its manifest`) {
		t.Fatalf("error %v", err)
	}
}

// An image's configuration costs its manifest and its configuration
// blob, never a layer; from the cache, even offline, nothing.
func TestConfigReadsNoLayer(t *testing.T) {
	rec := &requests{}
	host := testenv.Registry(t, rec.wrap)
	ref := testenv.PushRandom(t, host, "shop/web")
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	configDigest, _ := img.ConfigName()
	before := len(rec.list())
	cache := filepath.Join(t.TempDir(), "configs.json")
	c := &Configs{Cache: cache}
	cfg, err := c.Config(context.Background(), ref.String())
	if err != nil || cfg == nil {
		t.Fatalf("config %v, %v", cfg, err)
	}
	readConfig := false
	for _, r := range rec.list()[before:] {
		readConfig = readConfig || strings.HasSuffix(r, configDigest.String())
		for _, l := range layers {
			if d, _ := l.Digest(); strings.HasSuffix(r, d.String()) {
				t.Errorf("reading the configuration read a layer: %s", r)
			}
		}
	}
	if !readConfig {
		t.Errorf("the configuration blob was not read: %v", rec.list()[before:])
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
	asked := len(rec.list())
	again := &Configs{Cache: cache, Offline: true}
	if got, err := again.Config(context.Background(), ref.String()); err != nil || got == nil {
		t.Fatalf("from the cache: %v, %v", got, err)
	}
	if len(rec.list()) != asked {
		t.Errorf("the cache still asked the registry: %v", rec.list()[asked:])
	}
	other := strings.Replace(ref.String(), "@sha256:", "@sha256:0", 1)[:len(ref.String())]
	if _, err := again.Config(context.Background(), other); !errors.Is(err, ErrConfigOffline) {
		t.Errorf("an unknown image offline: %v", err)
	}
}
