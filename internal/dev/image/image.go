// Package image builds Cloister's container images without Docker and
// without pulling a base image: one layer with a static binary, CA
// certificates (the NSS bundle of golang.org/x/crypto/x509roots/fallback,
// pinned by module version) and a non-root user, assembled with
// go-containerregistry. Every timestamp is fixed, so the same binary
// gives the same image digest on any machine.
package image

import (
	"archive/tar"
	"bytes"
	"cmp"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Spec is one image.
type Spec struct {
	// Name of the binary and the image (cloister-cas).
	Name string
	// Binary is the static executable's path.
	Binary string
	// Extra are more static executables beside it, by path (an enclave
	// pod's image with the programs its simulated enclave runs).
	Extra []string
	// Files are more files, read-only, at their absolute paths in the
	// image (the CAS image's Gramine manifest template).
	Files   []File
	Version string
	// Revision is the source commit; Source the repository URL.
	Revision, Source string
	// Platform of the binaries; the host's when empty. Build refuses
	// binaries of another.
	Platform Platform
	// Licenses is the SPDX expression of what the image ships (default
	// Cloister's, Apache-2.0; the dev Vault image's is MPL-2.0).
	Licenses string
}

// UID and GID the images run as (distroless's "nonroot").
const (
	UID = 65532
	GID = 65532
)

// Paths inside the image.
const (
	BinDir     = "/usr/local/bin"
	CACertFile = "/etc/ssl/certs/ca-certificates.crt"
)

// epoch is every timestamp in the image: reproducible builds.
var epoch = time.Unix(0, 0).UTC()

// Build makes the image.
func Build(s Spec) (v1.Image, error) {
	if s.Platform == (Platform{}) {
		s.Platform = Host()
	}
	var bins []namedFile
	for _, p := range append([]string{s.Binary}, s.Extra...) {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		if err := checkMachine(p, data, s.Platform); err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		bins = append(bins, namedFile{path.Base(p), data})
	}
	bins[0].name = s.Name
	layerTar, err := rootfs(bins, s.Files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "cloister make images: " + s.Name, Comment: "static binary, CA certificates, non-root user",
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = s.Platform.OS, s.Platform.Architecture
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.User = fmt.Sprintf("%d:%d", UID, GID)
	cfg.Config.Entrypoint = []string{path.Join(BinDir, s.Name)}
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"PATH=" + BinDir, "SSL_CERT_FILE=" + CACertFile}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    s.Name,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.source":   s.Source,
		"org.opencontainers.image.licenses": cmp.Or(s.Licenses, "Apache-2.0"),
	}
	return mutate.ConfigFile(img, cfg)
}

// File is a file an image ships besides its binaries.
type File struct {
	Path string
	Data []byte
}

type namedFile struct {
	name string
	data []byte
}

// rootfs is the layer: directories, passwd/group with the non-root user,
// the CA bundle, the binaries and extra files, in a fixed order with
// fixed times.
func rootfs(bins []namedFile, extra []File) ([]byte, error) {
	var certs bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue // distrust-after roots cannot be expressed in a PEM bundle
		}
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dir := func(p string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(p string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	dirs := []string{"etc", "etc/ssl", "etc/ssl/certs", "usr", "usr/local", "usr/local/bin"}
	for _, f := range extra {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || strings.HasPrefix(f.Path, BinDir+"/") {
			return nil, fmt.Errorf("image file %q: an absolute, clean path outside %s", f.Path, BinDir)
		}
		for d := path.Dir(f.Path[1:]); d != "."; d = path.Dir(d) {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	// Parents first: a shorter path sorts before its children.
	slices.Sort(dirs)
	for _, d := range dirs {
		if err := dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := dir("tmp", 0o1777); err != nil {
		return nil, err
	}
	type entry struct {
		path string
		mode int64
		data []byte
	}
	files := []entry{
		{"etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, GID)},
		{"etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", GID)},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, certs.Bytes()},
	}
	for _, b := range bins {
		files = append(files, entry{"usr/local/bin/" + b.name, 0o755, b.data})
	}
	for _, f := range extra {
		files = append(files, entry{f.Path[1:], 0o444, f.Data})
	}
	for _, f := range files {
		if err := file(f.path, f.mode, f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
