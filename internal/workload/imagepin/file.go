package imagepin

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// File reads one regular file of an image named by digest, as a container
// of it would see the file (upper layers first, deletions honoured), and
// refuses one larger than limit bytes. The digest makes what is read the
// image the caller named, whichever registry serves it.
func File(ctx context.Context, image, file string, limit int64) ([]byte, error) {
	ref, err := name.NewDigest(image)
	if err != nil {
		return nil, fmt.Errorf("image %q: name it by digest (REPOSITORY@sha256:...): %w", image, err)
	}
	want := strings.TrimPrefix(path.Clean("/"+file), "/")
	if want == "" {
		return nil, fmt.Errorf("image %s: the path %q names no file", image, file)
	}
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithPlatform(ConfigPlatform))
	if err != nil {
		return nil, fmt.Errorf("image %s: reading its manifest: %w", image, err)
	}
	fs := mutate.Extract(img)
	defer func() { _ = fs.Close() }()
	tr := tar.NewReader(fs)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("image %s has no file /%s", image, want)
		}
		if err != nil {
			return nil, fmt.Errorf("image %s: reading its layers: %w", image, err)
		}
		if strings.TrimPrefix(path.Clean("/"+h.Name), "/") != want {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("image %s: /%s is not a regular file (a link or folder is not followed)", image, want)
		}
		if h.Size > limit {
			return nil, fmt.Errorf("image %s: /%s has %d bytes, more than %d", image, want, h.Size, limit)
		}
		data, err := io.ReadAll(io.LimitReader(tr, limit+1))
		if err != nil {
			return nil, fmt.Errorf("image %s: reading /%s: %w", image, want, err)
		}
		if int64(len(data)) > limit {
			return nil, fmt.Errorf("image %s: /%s has more than %d bytes", image, want, limit)
		}
		return data, nil
	}
}
