package image

import (
	"archive/tar"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// WriteOCI writes img as an OCI image layout in a tar file (what
// `ctr images import` and registries' tools read), its index naming it
// ref; files are in a fixed order with fixed times, so the tarball is as
// reproducible as the image.
func WriteOCI(img v1.Image, ref, file string) error {
	return writeLayout(file, func(p layout.Path) error { return p.AppendImage(img, refName(ref)) })
}

// WriteIndex is WriteOCI for an image index: the layout's index.json
// names the index ref, and holds every platform's image. ctr imports
// only its own platform's content from it unless told otherwise.
func WriteIndex(index v1.ImageIndex, ref, file string) error {
	return writeLayout(file, func(p layout.Path) error { return p.AppendIndex(index, refName(ref)) })
}

func refName(ref string) layout.Option {
	return layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})
}

// writeLayout writes an OCI layout that add fills into a tar file.
func writeLayout(file string, add func(layout.Path) error) error {
	tmp, err := os.MkdirTemp(filepath.Dir(file), ".oci-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := add(p); err != nil {
		return err
	}
	var paths []string
	err = filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err == nil && path != tmp {
			paths = append(paths, path)
		}
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	out, err := os.Create(file + ".tmp")
	if err != nil {
		return err
	}
	defer func() { _ = out.Close() }()
	tw := tar.NewWriter(out)
	for _, path := range paths {
		rel, _ := filepath.Rel(tmp, path)
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: epoch, Format: tar.FormatPAX, Mode: 0o644}
		if info.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(file+".tmp", file)
}
