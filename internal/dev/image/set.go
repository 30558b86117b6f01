package image

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Binaries are the images Cloister ships, one per binary of cmd/, named
// as the charts and the operator's defaults name them.
var Binaries = []string{
	"cloister", "cloister-operator", "cloister-cas", "cloister-las", "cloister-device-plugin", "cloister-pause",
	"cloister-initializer", "cloister-node-installer", "cloister-mesh", "cloister-enclave",
}

// DefaultRegistry is the repository prefix of Cloister's image names.
const DefaultRegistry = "ghcr.io/cloister-cc"

// Ref names an image: registry/name:version.
func Ref(registry, name, version string) string {
	return fmt.Sprintf("%s/%s:%s", registry, name, version)
}

// Built is one image index written by BuildAll.
type Built struct {
	// Digest is the index's: what a reference pins.
	Name, Ref, Digest, File string
	Index                   v1.ImageIndex
	// Image is the first platform's image (the host's, by default).
	Image v1.Image
}

// BuildAll builds the image index of every binary in binDir (Binaries),
// each with its files (by image name), for platforms (the host when
// none), into outDir/<name>.tar, named Ref(registry, name, version).
func BuildAll(binDir, outDir, registry, version, revision, source string, files map[string][]File, platforms ...Platform) ([]Built, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil { //nolint:gosec // image tarballs are public
		return nil, err
	}
	out := make([]Built, 0, len(Binaries))
	for _, b := range Binaries {
		built, err := BuildTo(Spec{Name: b, Binary: filepath.Join(binDir, b), Files: files[b], Version: version, Revision: revision, Source: source}, outDir, registry, platforms...)
		if err != nil {
			return nil, err
		}
		out = append(out, built)
	}
	return out, nil
}

// BuildTo builds the image index of s for platforms (the host when
// none) into outDir/<name>.tar, named Ref(registry, s.Name, s.Version).
func BuildTo(s Spec, outDir, registry string, platforms ...Platform) (Built, error) {
	index, images, err := BuildIndex(s, platforms)
	if err != nil {
		return Built{}, err
	}
	digest, err := index.Digest()
	if err != nil {
		return Built{}, err
	}
	built := Built{Name: s.Name, Ref: Ref(registry, s.Name, s.Version), Digest: digest.String(), File: filepath.Join(outDir, s.Name+".tar"), Index: index, Image: images[0]}
	if err := WriteIndex(index, built.Ref, built.File); err != nil {
		return Built{}, fmt.Errorf("writing %s: %w", built.File, err)
	}
	return built, nil
}

// ReadRef is the image name an OCI-layout tarball's index gives its
// image or image index (WriteOCI's or WriteIndex's ref), and its digest.
func ReadRef(file string) (ref, digest string, err error) {
	f, err := os.Open(file)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", "", fmt.Errorf("%s has no index.json: not an OCI image layout", file)
		}
		if err != nil {
			return "", "", fmt.Errorf("reading %s: %w", file, err)
		}
		if h.Name != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Digest      string            `json:"digest"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return "", "", fmt.Errorf("reading %s's index: %w", file, err)
		}
		for _, m := range index.Manifests {
			if ref := m.Annotations["org.opencontainers.image.ref.name"]; ref != "" {
				return ref, m.Digest, nil
			}
		}
		return "", "", fmt.Errorf("%s names no image (no org.opencontainers.image.ref.name)", file)
	}
}

// Pinned is ref with its digest: name:tag@sha256:..., what manifests
// should name so a moved tag cannot change what runs.
func (b Built) Pinned() string { return b.Ref + "@" + b.Digest }

// Repository is a reference without its tag or digest.
func Repository(ref string) string {
	if at := strings.IndexByte(ref, '@'); at >= 0 {
		ref = ref[:at]
	}
	if colon := strings.LastIndexByte(ref, ':'); colon > strings.LastIndexByte(ref, '/') {
		ref = ref[:colon]
	}
	return ref
}
