package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// testOwnerKey writes an owner's private key (PEM) and returns its path
// and public key's PEM.
func testOwnerKey(t *testing.T) (string, string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "owner.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	pub, err := keyfile.PublicPEM(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return path, pub
}

func testPublicKeyPEM(t *testing.T) string {
	t.Helper()
	_, pub := testOwnerKey(t)
	return pub
}

// enclave sign signs the manifest the resource derives, by the key of
// its spec.manifestKey only.
func TestEnclaveSign(t *testing.T) {
	key, pub := testOwnerKey(t)
	_, otherPub := testOwnerKey(t)
	resource := func(pub string) string {
		p := filepath.Join(t.TempDir(), "ned.yaml")
		doc := "apiVersion: enclave.cloister.dev/v1beta1\nkind: NitroEnclaveDeployment\nmetadata: {name: web}\nspec:\n  manifestKey: |\n    " +
			strings.ReplaceAll(strings.TrimSpace(pub), "\n", "\n    ") + "\n  userPlugins:\n  - {name: web, image: registry.example/web:1, command: [/web]}\n"
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := resource(pub)
	out, _, err := run(t, "enclave", "sign", "-f", file, "--key", key)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(file)
	var ned enclavev1beta1.NitroEnclaveDeployment
	if err := yaml.Unmarshal(data, &ned); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.FromSpec(&ned.Spec)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := keyfile.ParsePublic([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CheckSignature(strings.TrimSpace(out), owner); err != nil {
		t.Errorf("the signature printed: %v", err)
	}
	if _, _, err := run(t, "enclave", "sign", "-f", resource(otherPub), "--key", key); !errors.Is(err, manifest.ErrNotManifestKey) {
		t.Errorf("signing with another key than the resource's: %v", err)
	}
}
