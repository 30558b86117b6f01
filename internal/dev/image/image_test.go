package image

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// binary is a stand-in executable (this test binary).
func binary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestBuildIsReproducibleAndNonRoot(t *testing.T) {
	spec := Spec{Name: "cloister-cas", Binary: binary(t), Version: "v0.1.0", Revision: "abc", Source: "https://github.com/cloister-cc/cloister"}
	a, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Build(spec)
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds of the same binary: %s and %s", da, db)
	}
	spec.Version = "v0.2.0"
	c, _ := Build(spec)
	if dc, _ := c.Digest(); dc == da {
		t.Error("another version label gave the same digest")
	}
	// Another program's image says its own licence.
	spec.Licenses = "MPL-2.0"
	mpl, _ := Build(spec)
	if cfg, _ := mpl.ConfigFile(); cfg.Config.Labels["org.opencontainers.image.licenses"] != "MPL-2.0" {
		t.Errorf("licence label %q", cfg.Config.Labels["org.opencontainers.image.licenses"])
	}

	cfg, _ := a.ConfigFile()
	if cfg.Config.User != "65532:65532" || cfg.Config.Entrypoint[0] != "/usr/local/bin/cloister-cas" ||
		cfg.Config.Labels["org.opencontainers.image.version"] != "v0.1.0" || cfg.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" || cfg.OS != "linux" || cfg.Architecture != "amd64" || cfg.Created.Unix() != 0 {
		t.Errorf("config %+v", cfg.Config)
	}
	if m, _ := a.MediaType(); m != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("media type %s", m)
	}

	layers, _ := a.Layers()
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1 (no base image)", len(layers))
	}
	rc, _ := layers[0].Uncompressed()
	defer func() { _ = rc.Close() }()
	files := map[string][]byte{}
	modes := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name], modes[h.Name] = data, h.Mode
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s has time %s", h.Name, h.ModTime)
		}
	}
	bin, _ := os.ReadFile(spec.Binary)
	if !bytes.Equal(files["usr/local/bin/cloister-cas"], bin) || modes["usr/local/bin/cloister-cas"] != 0o755 {
		t.Error("the binary is not in /usr/local/bin with mode 0755")
	}
	if !bytes.Contains(files["etc/passwd"], []byte("nonroot:x:65532:65532:")) || modes["tmp/"] != 0o1777 {
		t.Errorf("passwd %q, /tmp mode %o", files["etc/passwd"], modes["tmp/"])
	}
	n, rest := 0, files["etc/ssl/certs/ca-certificates.crt"]
	for {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 100 {
		t.Errorf("%d CA certificates, want the NSS bundle", n)
	}
}

func TestWriteOCI(t *testing.T) {
	img, err := Build(Spec{Name: "cloister-las", Binary: binary(t), Version: "v0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.tar"), filepath.Join(dir, "two.tar")
	for _, f := range []string{one, two} {
		if err := WriteOCI(img, "ghcr.io/cloister-cc/cloister-las:v0.1.0", f); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(one)
	b, _ := os.ReadFile(two)
	if !bytes.Equal(a, b) {
		t.Error("two writes of one image differ")
	}
	// Unpacked, it is an OCI layout holding the image under its name.
	unpacked := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		target := filepath.Join(unpacked, h.Name) //nolint:gosec // unpacks an image this test built
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, _ := io.ReadAll(tr)
		if err := os.WriteFile(target, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := layout.FromPath(unpacked)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := p.ImageIndex()
	m, _ := idx.IndexManifest()
	want, _ := img.Digest()
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "ghcr.io/cloister-cc/cloister-las:v0.1.0" {
		t.Errorf("index %+v, want %s", m.Manifests, want)
	}
}

// BuildAll writes one tarball per binary, each naming its image, and
// ReadRef reads that name back; a tarball that is no OCI layout is refused.
func TestBuildAllAndReadRef(t *testing.T) {
	bin := t.TempDir()
	data, _ := os.ReadFile(binary(t))
	for _, b := range Binaries {
		if err := os.WriteFile(filepath.Join(bin, b), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	built, err := BuildAll(bin, t.TempDir(), "registry.example/x", "v1.2.3", "abc", "src", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(built) != len(Binaries) {
		t.Fatalf("%d images for %d binaries", len(built), len(Binaries))
	}
	for _, b := range built {
		ref, digest, err := ReadRef(b.File)
		if err != nil || ref != "registry.example/x/"+b.Name+":v1.2.3" || ref != b.Ref || digest != b.Digest {
			t.Errorf("%s: ReadRef = %q %q, %v; built %s", b.File, ref, digest, err, b.Pinned())
		}
	}
	for ref, repo := range map[string]string{
		"ghcr.io/x/las:v1@sha256:ab": "ghcr.io/x/las", "localhost:5000/las:v1": "localhost:5000/las", "localhost:5000/las": "localhost:5000/las",
	} {
		if got := Repository(ref); got != repo {
			t.Errorf("Repository(%q) = %q, want %q", ref, got, repo)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.tar")
	if err := os.WriteFile(bad, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadRef(bad); err == nil {
		t.Error("an empty tarball has a ref")
	}
}

// Extra binaries go beside the main one, under their own names, and
// extra files at their paths, their folders made; the entrypoint stays
// the main one's.
func TestBuildWithExtraBinaries(t *testing.T) {
	helper := filepath.Join(t.TempDir(), "helper")
	exe, _ := os.ReadFile(binary(t))
	if err := os.WriteFile(helper, append(exe, "#!helper"...), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := Build(Spec{Name: "cloister-enclave", Binary: binary(t), Extra: []string{helper}, Version: "v1",
		Files: []File{{Path: "/usr/local/lib/x/template", Data: []byte("a template")}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	layers, _ := img.Layers()
	rc, _ := layers[0].Uncompressed()
	defer func() { _ = rc.Close() }()
	found := map[string]string{}
	tr := tar.NewReader(rc)
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		data, _ := io.ReadAll(tr)
		found[h.Name] = string(data[max(len(data)-8, 0):])
	}
	if found["usr/local/bin/helper"] != "#!helper" || found["usr/local/bin/cloister-enclave"] == "" || cfg.Config.Entrypoint[0] != "/usr/local/bin/cloister-enclave" ||
		found["usr/local/lib/x/template"] != "template" || found["usr/local/lib/x/"] != "" {
		t.Errorf("files %v, entrypoint %v", found, cfg.Config.Entrypoint)
	}
}
