// Command images builds an OCI image index for every Cloister binary in
// -bin, with an image per platform of -platforms (see internal/dev/image),
// into -out as OCI-layout tarballs, and with -push also pushes them:
// `make images [PLATFORMS=all]`, `make push REGISTRY=...`.
package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/hack/images/shipped"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/workload/imagepin"
	"github.com/cloister-cc/cloister/internal/workload/imagesig"
)

// PinnedFile lists each image by digest, in -out; ConfigsFile holds
// their configurations, as generate's cache of them (imagepin.Configs)
// keeps them, for workspaces that pin these images without a registry.
const (
	PinnedFile  = "pinned.txt"
	ConfigsFile = "image-configs.json"
	// VaultImage is the dev cluster's Vault server's image (-vault).
	VaultImage = "vault"
)

func main() {
	bin := flag.String("bin", "bin", "directory of the static binaries (make build)")
	out := flag.String("out", ".cache/images", "directory for the OCI tarballs")
	registry := flag.String("registry", image.DefaultRegistry, "repository prefix of the image names")
	version := flag.String("version", "devel", "image tag and version label")
	revision := flag.String("revision", "", "source commit label")
	source := flag.String("source", "https://github.com/cloister-cc/cloister", "source repository label")
	push := flag.String("push", "", "also push the images under this registry prefix (credentials from the docker config)")
	signKey := flag.String("sign-key", "", "with -push, also sign each image with this ECDSA P-256 key (PEM, unencrypted), as cosign stores signatures")
	operatorLDFlags := flag.Bool("operator-ldflags", false,
		"only print the -X flags that pin cloister-operator's default images to the digests of the images of -bin (make build links them in)")
	cliLDFlags := flag.Bool("cli-ldflags", false,
		"only print the -X flags that pin the images the CLI names (the operator cloister install deploys, the initializer and mesh cloister generate injects, the base of enclave build's pod image) to the digests of -bin's images (make build links them in)")
	platformList := flag.String("platforms", "host", "platforms of the image indexes: host, all ("+platformNames()+"), or a comma-separated list; each one's binaries are in its folder of -bin (bin/OS_ARCH, the host's in bin)")
	vault := flag.String("vault", "", "also pack this Vault server (a static binary, MPL-2.0) as the dev cluster's image vault, for this machine's platform alone; never pushed")
	dirs := flag.Bool("dirs", false, "only print, per line, GOOS, GOARCH and the folder of -bin of each platform of -platforms (make build compiles into them)")
	flag.Parse()
	platforms, err := image.ParsePlatforms(*platformList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images: -platforms:", err)
		os.Exit(2)
	}
	if *dirs {
		for _, p := range platforms {
			fmt.Println(p.OS, p.Architecture, p.Dir(*bin))
		}
		return
	}
	pin := map[bool]func(bin, registry, version, revision, source string, platforms []image.Platform) (string, error){true: pinInstallImage, false: pinOperatorDefaults}[*cliLDFlags]
	if *cliLDFlags || *operatorLDFlags {
		flags, err := pin(*bin, *registry, *version, *revision, *source, platforms)
		if err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		fmt.Println(flags)
		return
	}
	var key *ecdsa.PrivateKey
	if *signKey != "" {
		data, err := os.ReadFile(*signKey)
		if err == nil {
			key, err = imagesig.ParsePrivateKey(data)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "images: -sign-key:", err)
			os.Exit(1)
		}
	}
	if *vault != "" && (*push != "" || len(platforms) != 1 || platforms[0] != image.Host()) {
		fmt.Fprintln(os.Stderr, "images: -vault packs the dev cluster's Vault for this machine only: give no -push and -platforms host")
		os.Exit(2)
	}
	stop := heartbeat(os.Stderr, 5*time.Second)
	err = run(*bin, *out, *registry, *version, *revision, *source, *push, *vault, key, platforms)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

// heartbeat says every period that packing goes on, until stop: packing
// (hashing and compressing hundreds of MB) takes tens of seconds cold.
func heartbeat(w io.Writer, period time.Duration) (stop func()) {
	start, done := time.Now(), make(chan struct{})
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_, _ = fmt.Fprintf(w, "images: still packing (%s)\n", time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done) }
}

func platformsString(ps []image.Platform) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.String()
	}
	return strings.Join(names, ", ")
}

func platformNames() string { return platformsString(image.All) }

func run(bin, out, registry, version, revision, source, push, vault string, key *ecdsa.PrivateKey, platforms []image.Platform) error {
	fmt.Fprintf(os.Stderr, "images: packing %d images for %s into %s\n", len(image.Binaries), platformsString(platforms), out)
	built, err := image.BuildAll(bin, out, registry, version, revision, source, shipped.Files, platforms...)
	if err != nil {
		return fmt.Errorf("%w (run make build first)", err)
	}
	// A Vault image of an earlier host build is not among these.
	if err := os.Remove(filepath.Join(out, VaultImage+".tar")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if vault != "" {
		fmt.Fprintln(os.Stderr, "images: packing the dev cluster's Vault server (its binary alone is hundreds of MB)")
		b, err := image.BuildTo(image.Spec{Name: VaultImage, Binary: vault, Version: version, Source: "https://github.com/hashicorp/vault", Licenses: "MPL-2.0"}, out, registry)
		if err != nil {
			return fmt.Errorf("the Vault image: %w", err)
		}
		built = append(built, b)
	}
	// NAME REF@DIGEST per line: what scripts pin manifests to.
	var pinned strings.Builder
	for _, b := range built {
		fmt.Fprintf(&pinned, "%s %s\n", b.Name, b.Pinned())
	}
	if err := os.WriteFile(filepath.Join(out, PinnedFile), []byte(pinned.String()), 0o644); err != nil { //nolint:gosec // the list of pinned image references is public
		return err
	}
	configs := &imagepin.Configs{Cache: filepath.Join(out, ConfigsFile)}
	for _, b := range built {
		file, err := b.Image.ConfigFile()
		if err != nil {
			return err
		}
		if err := configs.Put(b.Pinned(), file); err != nil {
			return err
		}
	}
	if err := configs.Save(); err != nil {
		return err
	}
	for _, b := range built {
		fmt.Printf("%s@%s\t%s\n", b.Ref, b.Digest, b.File)
		if push == "" {
			continue
		}
		tag, err := name.NewTag(image.Ref(strings.TrimSuffix(push, "/"), b.Name, version))
		if err != nil {
			return fmt.Errorf("-push %q: %w", push, err)
		}
		if err := remote.WriteIndex(tag, b.Index, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", tag, err)
		}
		fmt.Printf("pushed %s@%s\n", tag, b.Digest)
		if key == nil {
			continue
		}
		// The index's signature covers every platform's manifest, each
		// named by its digest in the index.
		if err := imagesig.Sign(context.Background(), tag.Context().Digest(b.Digest), key, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return err
		}
		fmt.Printf("signed %s@%s\n", tag.Context(), b.Digest)
	}
	return nil
}

// pinInstallImage returns the linker flags of the images the CLI names:
// the operator image cloister install deploys (built in memory from the
// operator binary in bin, which must already carry its own pins) and the
// initializer and the mesh cloister generate injects.
func pinInstallImage(bin, registry, version, revision, source string, platforms []image.Platform) (string, error) {
	var flags []string
	for _, p := range []struct{ name, variable string }{
		{"cloister-operator", "github.com/cloister-cc/cloister/internal/operator/install.OperatorImage"},
		{"cloister-initializer", "github.com/cloister-cc/cloister/internal/cli.InitializerImage"},
		{"cloister-mesh", "github.com/cloister-cc/cloister/internal/cli.MeshImage"},
		{"cloister-enclave", "github.com/cloister-cc/cloister/internal/cli.EnclaveImage"},
	} {
		ref, err := pinned(bin, p.name, registry, version, revision, source, platforms)
		if err != nil {
			return "", err
		}
		flags = append(flags, "-X "+p.variable+"="+ref)
	}
	return strings.Join(flags, " "), nil
}

// pinned builds the image index of one binary in memory: REF@DIGEST.
func pinned(bin, name, registry, version, revision, source string, platforms []image.Platform) (string, error) {
	index, _, err := image.BuildIndex(image.Spec{Name: name, Binary: filepath.Join(bin, name), Files: shipped.Files[name], Version: version, Revision: revision, Source: source}, platforms)
	if err != nil {
		return "", err
	}
	digest, err := index.Digest()
	if err != nil {
		return "", err
	}
	return image.Ref(registry, name, version) + "@" + digest.String(), nil
}

// operatorDefaults are the images cloister-operator names by default, by
// the variable of its main package that holds each.
var operatorDefaults = map[string]string{
	"cloister-device-plugin": "devicePluginImage", "cloister-las": "lasImage", "cloister-cas": "casImage", "cloister-node-installer": "nodeInstallerImage", "cloister-enclave": "enclaveImage",
	// The initializer of the confidential pods the operator makes itself (a Vault's).
	"cloister-initializer": "initializerImage",
}

// pinOperatorDefaults builds the images the operator deploys (in memory)
// and returns the linker flags that make them its defaults by digest.
func pinOperatorDefaults(bin, registry, version, revision, source string, platforms []image.Platform) (string, error) {
	var flags []string
	for _, name := range image.Binaries {
		variable, ok := operatorDefaults[name]
		if !ok {
			continue
		}
		ref, err := pinned(bin, name, registry, version, revision, source, platforms)
		if err != nil {
			return "", err
		}
		flags = append(flags, fmt.Sprintf("-X main.%s=%s", variable, ref))
	}
	return strings.Join(flags, " "), nil
}
