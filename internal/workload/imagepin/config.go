package imagepin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

// ConfigPlatform is the platform whose image generate reads from an
// index: confidential VMs (SEV-SNP, TDX) are amd64.
var ConfigPlatform = v1.Platform{OS: "linux", Architecture: "amd64"}

// Configs reads what pinned images run (entrypoint, command,
// environment, folder, user) from their configuration blobs, never their
// layers, and keeps them in a cache file by digest: a digest names its
// configuration for good, so reruns and offline runs ask no registry.
type Configs struct {
	Offline bool
	// Cache is a JSON file of pinned image to configuration; empty for
	// none.
	Cache string

	mu      sync.Mutex
	known   map[string]*podpolicy.ImageConfig
	loaded  bool
	changed bool
}

// ErrConfigOffline: an image's configuration is not in the cache, and
// registries may not be asked.
var ErrConfigOffline = errors.New("its configuration is not in the cache, and registries may not be asked (offline)")

// Config returns the configuration of image, which names a digest.
func (c *Configs) Config(ctx context.Context, image string) (*podpolicy.ImageConfig, error) {
	ref, err := name.NewDigest(image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.load(); err != nil {
		return nil, err
	}
	if cfg, ok := c.known[image]; ok {
		return cfg, nil
	}
	if c.Offline {
		return nil, fmt.Errorf("image %q: %w", image, ErrConfigOffline)
	}
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithPlatform(ConfigPlatform))
	if err != nil {
		return nil, fmt.Errorf("image %q: reading its manifest: %w", image, err)
	}
	file, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %q: reading its configuration: %w", image, err)
	}
	cfg := ConfigOf(file)
	c.known[image] = cfg
	c.changed = true
	return cfg, nil
}

// ConfigOf is the part of an image's configuration a pod's policy pins.
func ConfigOf(file *v1.ConfigFile) *podpolicy.ImageConfig {
	return &podpolicy.ImageConfig{
		Entrypoint: file.Config.Entrypoint, Cmd: file.Config.Cmd, Env: file.Config.Env,
		WorkingDir: file.Config.WorkingDir, User: file.Config.User,
	}
}

// Put records the configuration of image (pinned) without asking a
// registry: for images built here, which no registry serves yet.
func (c *Configs) Put(image string, file *v1.ConfigFile) error {
	if _, err := name.NewDigest(image); err != nil {
		return fmt.Errorf("image %q: %w", image, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.load(); err != nil {
		return err
	}
	c.known[image] = ConfigOf(file)
	c.changed = true
	return nil
}

func (c *Configs) load() error {
	if c.loaded {
		return nil
	}
	c.known, c.loaded = map[string]*podpolicy.ImageConfig{}, true
	return loadCache(c.Cache, "image configuration cache", &c.known)
}

// Save writes the cache if a configuration was read.
func (c *Configs) Save() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.changed {
		return nil
	}
	c.changed = false
	return saveCache(c.Cache, "image configuration cache", c.known)
}
