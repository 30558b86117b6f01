package manifest

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
)

// The files beside the mounted manifest: its owner's signature and, for
// a simulated enclave only, the owner's public key (a Nitro Enclave's
// image carries the key, measured into PCR2).
const (
	SignatureFile = "manifest.sig"
	KeyFile       = "manifest-key.pub"
)

// ErrNotSigned: a manifest without a valid signature by the enclave's
// manifest key.
var ErrNotSigned = errors.New("the manifest is not signed by the key the enclave image carries")

// maxSignature bounds a signature's base64 (an ECDSA P-256 signature is
// at most 72 bytes).
const maxSignature = 256

// Sign signs m's canonical JSON (SHA-256, ECDSA P-256 ASN.1) with the
// owner's key, in base64: what spec.manifestSignature holds.
func Sign(m *Manifest, key *ecdsa.PrivateKey) (string, error) {
	sum := sha256.Sum256(m.JSON())
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		return "", fmt.Errorf("signing the manifest: %w", err)
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// CheckSignature verifies sig over m's canonical JSON by pub: the bytes
// a ConfigMap's formatting may change are not what is signed.
func (m *Manifest) CheckSignature(sig string, pub *ecdsa.PublicKey) error {
	if sig == "" {
		return fmt.Errorf("%w: it has no signature", ErrNotSigned)
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(sig) > maxSignature {
		return fmt.Errorf("%w: the signature is not base64 of an ECDSA signature", ErrNotSigned)
	}
	sum := sha256.Sum256(m.JSON())
	if !ecdsa.VerifyASN1(pub, sum[:], raw) {
		return fmt.Errorf("%w: the signature is by another key, or of another manifest", ErrNotSigned)
	}
	return nil
}

// ErrNotManifestKey: a key that is not the resource's spec.manifestKey,
// whose signature the enclave would refuse.
var ErrNotManifestKey = errors.New("the key is not the resource's spec.manifestKey: the enclave would refuse its signature")

// SignSpec signs the manifest of a NitroEnclaveDeployment's spec with its
// owner's key, which must be the spec's manifest key when it names one.
func SignSpec(spec *enclavev1beta1.NitroEnclaveDeploymentSpec, key *ecdsa.PrivateKey) (sig string, m *Manifest, err error) {
	if m, err = FromSpec(spec); err != nil {
		return "", nil, err
	}
	if spec.ManifestKey != "" {
		pub, err := keyfile.ParsePublic([]byte(spec.ManifestKey))
		if err != nil {
			return "", nil, fmt.Errorf("spec.manifestKey: %w", err)
		}
		if !pub.Equal(&key.PublicKey) {
			return "", nil, ErrNotManifestKey
		}
	}
	sig, err = Sign(m, key)
	return sig, m, err
}
