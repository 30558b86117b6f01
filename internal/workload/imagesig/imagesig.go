// Package imagesig signs images and verifies their signatures in the
// layout cosign uses with a key pair: a "simple signing" payload naming the
// image digest, signed with ECDSA P-256, stored in the registry as the tag
// sha256-<digest>.sig of the image's repository. It has not been checked
// against the cosign binary (not available here). Keyless (Fulcio, Rekor)
// signatures are not handled.
package imagesig

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
)

// The names cosign gives the parts of a signature.
const (
	payloadType         = "cosign container image signature"
	payloadMediaType    = types.MediaType("application/vnd.dev.cosign.simplesigning.v1+json")
	annotationSignature = "dev.cosignproject.cosign/signature"
)

// payload is what is signed: the image's digest and name.
type payload struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]string `json:"optional"`
}

// SignatureTag is where the signatures of image live.
func SignatureTag(image name.Digest) (name.Tag, error) {
	return name.NewTag(image.Context().String() + ":" + strings.Replace(image.DigestStr(), ":", "-", 1) + ".sig")
}

// SignatureImage is the signature of image by key, as cosign stores it.
func SignatureImage(image name.Digest, key *ecdsa.PrivateKey) (v1.Image, error) {
	var p payload
	p.Critical.Identity.DockerReference = image.Context().String()
	p.Critical.Image.DockerManifestDigest = image.DigestStr()
	p.Critical.Type = payloadType
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:       static.NewLayer(body, payloadMediaType),
		Annotations: map[string]string{annotationSignature: base64.StdEncoding.EncodeToString(sig)},
	})
	if err != nil {
		return nil, err
	}
	return mutate.MediaType(img, types.OCIManifestSchema1), nil
}

// Sign pushes the signature of image by key to its repository.
func Sign(ctx context.Context, image name.Digest, key *ecdsa.PrivateKey, opts ...remote.Option) error {
	tag, err := SignatureTag(image)
	if err != nil {
		return err
	}
	img, err := SignatureImage(image, key)
	if err != nil {
		return err
	}
	if err := remote.Write(tag, img, append(opts, remote.WithContext(ctx))...); err != nil {
		return fmt.Errorf("pushing the signature of %s: %w", image, err)
	}
	return nil
}

// ErrNotSigned: no signature by the key was found for the image.
var ErrNotSigned = errors.New("no valid signature by the given key")

// Verify checks that the registry holds a signature of image by pub that
// names exactly this digest.
func Verify(ctx context.Context, image name.Digest, pub *ecdsa.PublicKey, opts ...remote.Option) error {
	tag, err := SignatureTag(image)
	if err != nil {
		return err
	}
	img, err := remote.Image(tag, append(opts, remote.WithContext(ctx))...)
	if err != nil {
		return fmt.Errorf("image %s: %w: reading its signatures (%s): %w", image, ErrNotSigned, tag, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var why []string
	for i, l := range layers {
		if i >= len(m.Layers) {
			break
		}
		if err := verifyLayer(l, m.Layers[i].Annotations[annotationSignature], image, pub); err != nil {
			why = append(why, err.Error())
			continue
		}
		return nil
	}
	return fmt.Errorf("image %s: %w (%d signatures: %s)", image, ErrNotSigned, len(layers), strings.Join(why, "; "))
}

func verifyLayer(l v1.Layer, sigB64 string, image name.Digest, pub *ecdsa.PublicKey) error {
	sig, err := base64.StdEncoding.DecodeString(sigB64)
	if err != nil || len(sig) == 0 {
		return errors.New("a layer without a signature")
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	body, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if !ecdsa.VerifyASN1(pub, sum[:], sig) {
		return errors.New("a signature by another key")
	}
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("a signed payload that does not parse: %w", err)
	}
	if p.Critical.Type != payloadType || p.Critical.Image.DockerManifestDigest != image.DigestStr() {
		return fmt.Errorf("a signature of another image (%s)", p.Critical.Image.DockerManifestDigest)
	}
	return nil
}

// NewKey makes a signing key (ECDSA P-256, as cosign's).
func NewKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

// ParsePrivateKey reads the signing key (unencrypted PEM, ECDSA P-256).
func ParsePrivateKey(data []byte) (*ecdsa.PrivateKey, error) {
	k, err := keyfile.ParsePrivate(data)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	return k, nil
}

// ParsePublicKey reads a PEM PKIX ECDSA P-256 public key (cosign.pub).
func ParsePublicKey(data []byte) (*ecdsa.PublicKey, error) {
	k, err := keyfile.ParsePublic(data)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	return k, nil
}
