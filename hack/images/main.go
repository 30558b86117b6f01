// Command images builds an OCI image for every Cloister binary in -bin
// (see internal/image) into -out as OCI-layout tarballs, and with -push
// also pushes them: `make images`, `make push REGISTRY=...`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/internal/image"
)

// Binaries are the images Cloister ships, named like the charts use them.
var binaries = []string{"cloister", "cloister-operator", "cloister-cas", "cloister-las", "cloister-device-plugin"}

func main() {
	bin := flag.String("bin", "bin", "directory of the static binaries (make build)")
	out := flag.String("out", ".cache/images", "directory for the OCI tarballs")
	registry := flag.String("registry", "ghcr.io/cloister-cc", "repository prefix of the image names")
	version := flag.String("version", "devel", "image tag and version label")
	revision := flag.String("revision", "", "source commit label")
	source := flag.String("source", "https://github.com/cloister-cc/cloister", "source repository label")
	push := flag.String("push", "", "also push the images under this registry prefix (credentials from the docker config)")
	flag.Parse()
	if err := run(*bin, *out, *registry, *version, *revision, *source, *push); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(bin, out, registry, version, revision, source, push string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, b := range binaries {
		img, err := image.Build(image.Spec{Name: b, Binary: filepath.Join(bin, b), Version: version, Revision: revision, Source: source})
		if err != nil {
			return fmt.Errorf("%w (run make build first)", err)
		}
		digest, err := img.Digest()
		if err != nil {
			return err
		}
		ref := fmt.Sprintf("%s/%s:%s", registry, b, version)
		file := filepath.Join(out, b+".tar")
		if err := image.WriteOCI(img, ref, file); err != nil {
			return err
		}
		fmt.Printf("%s@%s\t%s\n", ref, digest, file)
		if push == "" {
			continue
		}
		tag, err := name.NewTag(fmt.Sprintf("%s/%s:%s", push, b, version))
		if err != nil {
			return fmt.Errorf("-push %q: %w", push, err)
		}
		if err := remote.Write(tag, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", tag, err)
		}
		fmt.Printf("pushed %s@%s\n", tag, digest)
	}
	return nil
}
