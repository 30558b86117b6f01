// Package imagepin pins image references to digests for generate: a tag
// is resolved by reading only the registry's manifest (a HEAD request, a
// GET of the manifest where the registry gives no digest on HEAD), never
// layers; results are kept in a cache file so reruns ask no registry;
// offline, tags are refused. File is the one reader of layers: it reads
// one file of an image pinned by digest (an enclave's SIGSTRUCT).
package imagepin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
)

// ErrOffline is returned for a tag when registries may not be asked.
var ErrOffline = errors.New("names a tag, not a digest, and registries may not be asked (offline); pin it as NAME@sha256:<digest>")

// Pinner resolves tags. The zero value asks registries and keeps nothing.
type Pinner struct {
	// Offline refuses tags the cache does not know.
	Offline bool
	// Cache is a JSON file of image to pinned reference; empty for none.
	Cache string

	mu      sync.Mutex
	known   map[string]string
	loaded  bool
	changed bool
}

// Resolve returns image as NAME@sha256:..., the name as the user wrote
// it.
func (p *Pinner) Resolve(ctx context.Context, image string) (string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	if _, ok := ref.(name.Digest); ok {
		return image, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.load(); err != nil {
		return "", err
	}
	if pinned, ok := p.known[image]; ok {
		return pinned, nil
	}
	if p.Offline {
		return "", fmt.Errorf("image %q %w", image, ErrOffline)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	digest := ""
	if desc, err := remote.Head(ref, opts...); err == nil {
		digest = desc.Digest.String()
	} else {
		// Some registries give no digest on HEAD: the manifest itself
		// (still no layers) says it.
		desc, err := remote.Get(ref, opts...)
		if err != nil {
			return "", fmt.Errorf("image %q: reading its manifest: %w", image, err)
		}
		digest = desc.Digest.String()
	}
	tag := ref.(name.Tag)
	pinned := strings.TrimSuffix(image, ":"+tag.TagStr()) + "@" + digest
	p.known[image] = pinned
	p.changed = true
	return pinned, nil
}

func (p *Pinner) load() error {
	if p.loaded {
		return nil
	}
	p.known, p.loaded = map[string]string{}, true
	return loadCache(p.Cache, "digest cache", &p.known)
}

// Save writes the cache if something new was resolved.
func (p *Pinner) Save() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.changed {
		return nil
	}
	p.changed = false
	return saveCache(p.Cache, "digest cache", p.known)
}

// loadCache reads a cache file into v; a missing file is an empty cache.
func loadCache(path, what string, v any) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the %s: %w", what, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s %s: %w (delete it to ask the registries again)", what, path, err)
	}
	return nil
}

// saveCache writes v into a cache file, if there is one.
func saveCache(path, what string, v any) error {
	if path == "" {
		return nil
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if _, err := atomicfile.WriteIfChanged(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the %s: %w", what, err)
	}
	return nil
}
