// Package transit owns the part of Vault's transit secrets engine that
// Vault's and OpenBao's `seal "transit"` uses, as CAS serves it to a
// policy's attested Vault service: a key's ciphertext format
// ("vault:vN:BASE64"), encryption and decryption under a key version, and
// the requests and responses on the wire. Keys are CAS's, derived from its
// root seed per policy, service, key name and version (KeyRef.Label), so
// every replica of CAS, and CAS after any restart, has them, and nothing
// stores them.
package transit

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Prefix starts every ciphertext, as Vault's: the seal takes the middle
// field ("v1") for its key id.
const Prefix = "vault"

// Mount is the path Vault's transit seal names as mount_path: its
// requests are PUT /v1/transit/{encrypt,decrypt}/KEY.
const Mount = "transit"

// Limits of what CAS encrypts and decrypts: a seal wraps Vault's root key
// and its stored keys, a few hundred bytes.
const (
	MaxPlaintext = 32 << 10
	// MaxVersion bounds a key's version: a rotation per policy version.
	MaxVersion = 1 << 20
)

// maxCiphertext is the longest ciphertext of MaxPlaintext bytes.
var maxCiphertext = len(Prefix) + len(":v:") + len(strconv.Itoa(MaxVersion)) + base64.StdEncoding.EncodedLen(nonceSize+MaxPlaintext+tagSize)

const (
	nonceSize = 12
	tagSize   = 16
	// KeySize is the AES-256 key of one version.
	KeySize = 32
)

// KeyRef names one version of a transit key of a policy's service.
type KeyRef struct {
	Policy, Service, Name string
	Version               int
}

// Label is what CAS derives the key of r from its seed under: each part
// length-prefixed, so no two references share a label.
func (r KeyRef) Label() string {
	return fmt.Sprintf("transit/%d:%s/%d:%s/%d:%s/v%d", len(r.Policy), r.Policy, len(r.Service), r.Service, len(r.Name), r.Name, r.Version)
}

// Encrypt seals plaintext under key, r's: AES-256-GCM with a random
// nonce, r's label as associated data, as "vault:vN:BASE64(nonce|sealed)".
func Encrypt(key []byte, r KeyRef, plaintext []byte) (string, error) {
	if len(plaintext) > MaxPlaintext {
		return "", fmt.Errorf("plaintext: %d bytes, more than %d", len(plaintext), MaxPlaintext)
	}
	aead, err := newAEAD(key)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, nonceSize, nonceSize+len(plaintext)+tagSize)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	sealed := aead.Seal(nonce, nonce, plaintext, []byte(r.Label()))
	return fmt.Sprintf("%s:v%d:%s", Prefix, r.Version, base64.StdEncoding.EncodeToString(sealed)), nil
}

// Decrypt opens blob (ParseCiphertext's) under key, r's.
func Decrypt(key []byte, r KeyRef, blob []byte) ([]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(blob) < nonceSize+tagSize {
		return nil, ErrCiphertext
	}
	plaintext, err := aead.Open(nil, blob[:nonceSize], blob[nonceSize:], []byte(r.Label()))
	if err != nil {
		// Another key, version or policy's, or changed: which, is not
		// told.
		return nil, fmt.Errorf("%w: it does not open under %s version %d", ErrCiphertext, r.Name, r.Version)
	}
	return plaintext, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("transit key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// ErrCiphertext: a ciphertext that is not one of CAS's, or not of the
// key it is given to.
var ErrCiphertext = errors.New("ciphertext: not a transit ciphertext of this key")

// ParseCiphertext reads "vault:vN:BASE64": its key version (1 to
// MaxVersion, no leading zero) and the sealed bytes.
func ParseCiphertext(s string) (version int, blob []byte, err error) {
	if len(s) > maxCiphertext {
		return 0, nil, fmt.Errorf("%w: %d bytes, more than %d", ErrCiphertext, len(s), maxCiphertext)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 || parts[0] != Prefix || !strings.HasPrefix(parts[1], "v") {
		return 0, nil, fmt.Errorf("%w: want %s:vVERSION:BASE64", ErrCiphertext, Prefix)
	}
	digits := parts[1][1:]
	version, err = strconv.Atoi(digits)
	if err != nil || version < 1 || version > MaxVersion || strconv.Itoa(version) != digits {
		return 0, nil, fmt.Errorf("%w: version %q: a number from 1 to %d", ErrCiphertext, digits, MaxVersion)
	}
	blob, err = base64.StdEncoding.Strict().DecodeString(parts[2])
	if err != nil || len(blob) < nonceSize+tagSize {
		return 0, nil, fmt.Errorf("%w: the sealed part is not the base64 of a nonce, a ciphertext and its tag", ErrCiphertext)
	}
	return version, blob, nil
}
