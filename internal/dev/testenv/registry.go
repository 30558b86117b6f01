package testenv

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry serves a real OCI registry (go-containerregistry's, in memory)
// until the test ends and returns its host; wrap, if given, sees every
// request first.
func Registry(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(registryHandler(wrap))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// registryHandler is go-containerregistry's in-memory registry, seen
// first by wrap when given.
func registryHandler(wrap func(http.Handler) http.Handler) http.Handler {
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	return h
}

// TLSRegistry is Registry over HTTPS, with a certificate of its own: its
// host and the transport that trusts it.
func TLSRegistry(t testing.TB, wrap func(http.Handler) http.Handler) (string, http.RoundTripper) {
	t.Helper()
	srv := httptest.NewTLSServer(registryHandler(wrap))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://"), srv.Client().Transport
}

// PushRandom writes a random image as host/repo:v1 and returns it by
// digest.
func PushRandom(t testing.TB, host, repo string) name.Digest {
	t.Helper()
	img, err := random.Image(256, 2)
	if err != nil {
		t.Fatal(err)
	}
	return push(t, host, repo, img)
}

// PushFiles writes an image of one layer holding files (path to
// content) as host/repo:v1 and returns it by digest.
func PushFiles(t testing.TB, host, repo string, files map[string][]byte) name.Digest {
	t.Helper()
	layer, err := crane.Layer(files)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	return push(t, host, repo, img)
}

func push(t testing.TB, host, repo string, img v1.Image) name.Digest {
	t.Helper()
	tag, err := name.NewTag(host + "/" + repo + ":v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return tag.Context().Digest(d.String())
}
