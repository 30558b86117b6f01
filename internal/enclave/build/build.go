// Package build makes a Nitro Enclave's image from a
// NitroEnclaveDeployment: AWS's boot files (kernel, init, the Nitro Secure
// Module's driver) in the boot ramdisk, and in the application's ramdisk
// the orchestrator, which init runs, with each user plugin's image, taken
// by digest from its registry and flattened. The same inputs give the
// same bytes, so PCR0 to PCR2 are known before any enclave boots.
package build

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/internal/base/elfarch"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/enclave/eif"
)

// Where the application's ramdisk puts things: AWS's init chroots into
// rootfs and runs cmd there with env.
const (
	OrchestratorPath = "/usr/local/bin/cloister-enclave"
	// ManifestKeyPath holds the owner's manifest key in the enclave: the
	// orchestrator takes only manifests it signed.
	ManifestKeyPath = "/etc/cloister-enclave/manifest-key.pub"
	// PluginsDir holds each plugin's image, flattened, under its name.
	PluginsDir = "/plugins"
	rootfs     = "rootfs"
)

// DefaultCmdline is the command line of the kernel AWS ships with
// nitro-cli for x86_64 (its blobs' cmdline file).
const DefaultCmdline = "reboot=k panic=30 pci=off nomodules console=ttyS0 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd random.trust_cpu=on"

// Plugin is a user plugin whose image the enclave carries.
type Plugin struct {
	Name string
	// Image is a reference by digest (REPOSITORY@sha256:...).
	Image string
}

// Fetcher gets an image by digest for a platform (from an index, that
// platform's image).
type Fetcher func(ctx context.Context, ref name.Digest, platform v1.Platform) (v1.Image, error)

// Remote fetches from registries, with the docker configuration's
// credentials unless options say otherwise.
func Remote(opts ...remote.Option) Fetcher {
	return func(ctx context.Context, ref name.Digest, platform v1.Platform) (v1.Image, error) {
		all := append([]remote.Option{remote.WithContext(ctx), remote.WithPlatform(platform), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
		return remote.Image(ref, all...)
	}
}

// Inputs are everything an enclave image is made of.
type Inputs struct {
	// Kernel, Init and NSM are AWS's boot files (nitro-cli's blobs:
	// bzImage or Image, init, nsm.ko) for the enclave's architecture.
	Kernel, Init, NSM []byte
	// Cmdline is the kernel's; DefaultCmdline when empty.
	Cmdline string
	// Orchestrator is cloister-enclave built for Arch.
	Orchestrator []byte
	// ManifestKey is the owner's public key (PEM) every manifest must be
	// signed by: in the image, it is measured into PCR2.
	ManifestKey []byte
	// Arch is amd64 or arm64 (Graviton).
	Arch    string
	Plugins []Plugin
	// Name and Version describe the image in its metadata (not measured).
	Name, Version string
	Fetch         Fetcher
	// MaxPluginBytes bounds each plugin's flattened image; the
	// application's ramdisk as a whole is bounded by eif.MaxRamdisk.
	MaxPluginBytes int64
}

// DefaultMaxPluginBytes bounds a plugin's image: an enclave's memory
// holds it whole.
const DefaultMaxPluginBytes = 2 << 30

// Build makes the enclave image.
func Build(ctx context.Context, in Inputs) (*eif.Image, error) {
	if in.Arch != "amd64" && in.Arch != "arm64" {
		return nil, fmt.Errorf("architecture %q: Nitro Enclaves run on amd64 and arm64", in.Arch)
	}
	for what, data := range map[string][]byte{"the kernel": in.Kernel, "init": in.Init, "the NSM driver": in.NSM} {
		if len(data) == 0 {
			return nil, fmt.Errorf("%s is empty: take it from nitro-cli's blobs for %s", what, in.Arch)
		}
	}
	if err := elfarch.Check("the orchestrator", in.Orchestrator, in.Arch); err != nil {
		return nil, err
	}
	var boot eif.Ramdisk
	for _, f := range []struct {
		path string
		perm uint32
		data []byte
	}{{"init", 0o755, in.Init}, {"nsm.ko", 0o644, in.NSM}} {
		if err := boot.File(f.path, f.perm, f.data); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"dev", "proc", "sys"} {
		if err := boot.Dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if _, err := keyfile.ParsePublic(in.ManifestKey); err != nil {
		return nil, fmt.Errorf("the manifest key (spec.manifestKey): %w: an enclave takes manifests its owner signed only", err)
	}
	var app eif.Ramdisk
	if err := app.File("cmd", 0o644, []byte(OrchestratorPath+"\norchestrator\n--manifest-key\n"+ManifestKeyPath+"\n")); err != nil {
		return nil, err
	}
	if err := app.File(rootfs+ManifestKeyPath, 0o644, in.ManifestKey); err != nil {
		return nil, err
	}
	if err := app.File("env", 0o644, []byte("PATH=/usr/local/bin:/usr/bin:/bin\n")); err != nil {
		return nil, err
	}
	if err := app.File(rootfs+OrchestratorPath, 0o755, in.Orchestrator); err != nil {
		return nil, err
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp"} {
		if err := app.Dir(path.Join(rootfs, d), map[bool]uint32{true: 0o1777, false: 0o755}[d == "tmp"]); err != nil {
			return nil, err
		}
	}
	platform := v1.Platform{OS: "linux", Architecture: in.Arch}
	images := map[string]string{}
	for _, p := range in.Plugins {
		digest, err := name.NewDigest(p.Image)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: image %q: name it by digest (REPOSITORY@sha256:...), so the image and its PCR2 cannot change: %w", p.Name, p.Image, err)
		}
		if in.Fetch == nil {
			return nil, errors.New("no way to fetch the plugins' images")
		}
		img, err := in.Fetch(ctx, digest, platform)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: fetching %s for %s: %w", p.Name, digest, platform.String(), err)
		}
		limit := in.MaxPluginBytes
		if limit <= 0 {
			limit = DefaultMaxPluginBytes
		}
		if err := flatten(&app, path.Join(rootfs, PluginsDir, p.Name), img, limit); err != nil {
			return nil, fmt.Errorf("plugin %s (%s): %w", p.Name, digest, err)
		}
		images[p.Name] = digest.String()
	}
	bootBytes, err := boot.Bytes()
	if err != nil {
		return nil, err
	}
	appBytes, err := app.Bytes()
	if err != nil {
		return nil, err
	}
	meta, err := metadata(in, images)
	if err != nil {
		return nil, err
	}
	cmdline := in.Cmdline
	if cmdline == "" {
		cmdline = DefaultCmdline
	}
	return &eif.Image{Kernel: in.Kernel, Cmdline: cmdline, Ramdisks: [][]byte{bootBytes, appBytes}, Metadata: meta, ARM64: in.Arch == "arm64"}, nil
}

// metadata is nitro-cli's metadata section (what describe-eif shows),
// with a fixed build time: reproducible.
func metadata(in Inputs, images map[string]string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"ImageName":    in.Name,
		"ImageVersion": in.Version,
		"BuildMetadata": map[string]string{
			"BuildTime": "1970-01-01T00:00:00Z", "BuildTool": "cloister enclave build", "BuildToolVersion": in.Version,
			"OperatingSystem": "Linux", "KernelVersion": "",
		},
		"DockerInfo":     map[string]any{},
		"CustomMetadata": map[string]any{"plugins": images},
	})
}

// flatten adds img's file system (its layers applied in order,
// whiteouts honoured) under dir: folders, regular files, symbolic links
// and hard links (as copies); device nodes and FIFOs are left out (the
// enclave's kernel makes /dev).
func flatten(r *eif.Ramdisk, dir string, img v1.Image, limit int64) error {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	lr := &io.LimitedReader{R: rc, N: limit + 1}
	tr := tar.NewReader(lr)
	// Extract gives the top layer's files first, so a hard link may come
	// before its target: links are resolved at the end.
	files := map[string][]byte{}
	type hardLink struct {
		target, to string
		perm       uint32
	}
	var links []hardLink
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if lr.N <= 0 {
			return fmt.Errorf("its files exceed %d bytes", limit)
		}
		if err != nil {
			return fmt.Errorf("reading its layers: %w", err)
		}
		rel := path.Clean("/" + h.Name)
		if rel == "/" {
			continue
		}
		target := path.Join(dir, rel)
		perm := uint32(h.Mode) & 0o1777 //nolint:gosec // permission bits only
		switch h.Typeflag {
		case tar.TypeDir:
			err = r.Dir(target, perm)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				files[rel] = data
				err = r.File(target, perm, data)
			}
		case tar.TypeSymlink:
			err = r.Symlink(target, h.Linkname)
		case tar.TypeLink:
			links = append(links, hardLink{target, path.Clean("/" + h.Linkname), perm})
		default:
			continue
		}
		if lr.N <= 0 {
			return fmt.Errorf("its files exceed %d bytes", limit)
		}
		if err != nil {
			return err
		}
	}
	for _, l := range links {
		data, ok := files[l.to]
		if !ok {
			return fmt.Errorf("hard link %s to %s, which is no file of the image", l.target, l.to)
		}
		if err := r.File(l.target, l.perm, data); err != nil {
			return err
		}
	}
	return nil
}
