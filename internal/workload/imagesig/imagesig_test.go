package imagesig

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

func push(t *testing.T, host, repo string) name.Digest { return testenv.PushRandom(t, host, repo) }

// Against a real registry implementation (go-containerregistry's, in
// memory): a signed image verifies with its key only; an unsigned one,
// another key's signature or a signature moved to another image do not.
func TestSignAndVerify(t *testing.T) {
	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	ctx := context.Background()
	key, _ := NewKey()
	other, _ := NewKey()

	signed := push(t, host, "cloister/operator")
	if err := Sign(ctx, signed, key); err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, signed, &key.PublicKey); err != nil {
		t.Fatalf("a signed image: %v", err)
	}
	if err := Verify(ctx, signed, &other.PublicKey); !errors.Is(err, ErrNotSigned) || !strings.Contains(err.Error(), "a signature by another key") {
		t.Errorf("another key: %v", err)
	}
	unsigned := push(t, host, "cloister/las")
	if err := Verify(ctx, unsigned, &key.PublicKey); !errors.Is(err, ErrNotSigned) {
		t.Errorf("an unsigned image: %v", err)
	}
	// The signature of one image copied to another's tag says which it is.
	sig, err := SignatureImage(signed, key)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := SignatureTag(unsigned)
	if err := remote.Write(tag, sig); err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, unsigned, &key.PublicKey); !errors.Is(err, ErrNotSigned) || !strings.Contains(err.Error(), "a signature of another image") {
		t.Errorf("a moved signature: %v", err)
	}
}

func TestKeys(t *testing.T) {
	if _, err := ParsePublicKey([]byte("nonsense")); err == nil {
		t.Error("nonsense parsed as a public key")
	}
	if _, err := ParsePrivateKey([]byte("-----BEGIN ENCRYPTED COSIGN PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED COSIGN PRIVATE KEY-----\n")); err == nil || !strings.Contains(err.Error(), "want an unencrypted PRIVATE KEY") {
		t.Errorf("an encrypted cosign key: %v", err)
	}
}
