package image

import (
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BuildIndex makes the image of s for each platform and an OCI image
// index of them, in the order given. s's binaries name the host's
// (make build's bin); each other platform's are taken from the same
// names in its folder (Platform.Dir). images are the platforms' images,
// in the same order.
func BuildIndex(s Spec, platforms []Platform) (index v1.ImageIndex, images []v1.Image, err error) {
	if len(platforms) == 0 {
		platforms = []Platform{Host()}
	}
	index = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		one := s
		one.Platform = p
		one.Binary = relocate(s.Binary, p)
		one.Extra = make([]string, len(s.Extra))
		for i, e := range s.Extra {
			one.Extra[i] = relocate(e, p)
		}
		img, err := Build(one)
		if err != nil {
			return nil, nil, err
		}
		images = append(images, img)
		index = mutate.AppendManifests(index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p.OCI()}})
	}
	if _, err := index.Digest(); err != nil {
		return nil, nil, fmt.Errorf("image index %s: %w", s.Name, err)
	}
	return index, images, nil
}

// relocate is the path of the host binary file's counterpart for p.
func relocate(file string, p Platform) string {
	return filepath.Join(p.Dir(filepath.Dir(file)), filepath.Base(file))
}
