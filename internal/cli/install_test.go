package cli

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/workload/imagesig"
)

// --verify-image-signatures refuses an image its key did not sign before
// touching the cluster, and lets a signed one through (to the cluster,
// which here does not exist).
func TestInstallVerifiesImageSignatures(t *testing.T) {
	host := testenv.Registry(t, nil)
	pushImage := func(repo string) name.Digest { return testenv.PushRandom(t, host, repo) }
	key, _ := imagesig.NewKey()
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pub := filepath.Join(t.TempDir(), "cosign.pub")
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	signed, unsigned := pushImage("cloister-operator"), pushImage("cloister-las")
	if err := imagesig.Sign(context.Background(), signed, key); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	base := []string{"install", "--kubeconfig", missing, "--verify-image-signatures", pub}

	_, _, err := run(t, append(base, "--image", unsigned.String())...)
	if err == nil || !strings.Contains(err.Error(), "refusing to deploy: image "+unsigned.String()+": no valid signature by the given key") {
		t.Errorf("an unsigned operator image: %v", err)
	}
	_, _, err = run(t, append(base, "--image", signed.String(), "--set", "images.las="+unsigned.String())...)
	if err == nil || !strings.Contains(err.Error(), "refusing to deploy: image "+unsigned.String()) {
		t.Errorf("an unsigned LAS image: %v", err)
	}
	_, _, err = run(t, append(base, "--image", host+"/cloister-operator:v1")...)
	if err == nil || !strings.Contains(err.Error(), "only an image named by digest can be verified") {
		t.Errorf("an image by tag: %v", err)
	}
	_, _, err = run(t, append(base, "--image", signed.String())...)
	if err == nil || strings.Contains(err.Error(), "refusing") || !strings.Contains(err.Error(), "finding the cluster") {
		t.Errorf("a signed image goes on to the cluster: %v", err)
	}
}

// --set-version pins the release's operator image to the digest its
// registry gives for the tag.
func TestInstallSetVersion(t *testing.T) {
	reg := httptest.NewServer(registry.New())
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	img, _ := random.Image(128, 1)
	tag, _ := name.NewTag(host + "/cloister/cloister-operator:v1.2.3")
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	_, stderr, err := run(t, "install", "--kubeconfig", missing, "--image-registry", host+"/cloister", "--set-version", "v1.2.3")
	if want := "operator v1.2.3: " + host + "/cloister/cloister-operator@" + d.String(); !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	if err == nil || !strings.Contains(err.Error(), "finding the cluster") {
		t.Errorf("err %v", err)
	}
	if _, _, err := run(t, "install", "--kubeconfig", missing, "--image-registry", host+"/cloister", "--set-version", "v9"); err == nil || !strings.Contains(err.Error(), "looking up the operator image "+host+"/cloister/cloister-operator:v9") {
		t.Errorf("an unknown version: %v", err)
	}
}

// The DCAP API key is checked before anything is done, and errors never
// show it.
func TestInstallDCAPKeyFlags(t *testing.T) {
	const bad = "not-a-key-but-secret"
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dcap-api", bad, "--reconcile"}, "--dcap-api: the DCAP API key is not 32 hex digits"},
		{[]string{"--dcap-api-file", keyFile, "--reconcile"}, "the DCAP API key is not 32 hex digits"},
		{[]string{"--dcap-api", strings.Repeat("a", 32), "--dcap-api-file", keyFile, "--reconcile"}, "exclude each other"},
		{[]string{"--dcap-api-file", keyFile + ".missing", "--reconcile"}, "--dcap-api-file"},
		{[]string{"--dcap-api", strings.Repeat("a", 32)}, "add --reconcile"},
	} {
		_, stderr, err := run(t, append([]string{"install"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error()+stderr, bad) {
			t.Errorf("%q: %v (stderr %q), want %q without the key", tc.args, err, stderr, tc.want)
		}
	}
}
