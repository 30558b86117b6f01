package orchestrator

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// An orchestrator that carries its owner's key applies only manifests
// the owner signed: unsigned, foreign-signed, or signed for another
// manifest, it refuses them and keeps what it runs.
func TestOnlySignedManifests(t *testing.T) {
	owner, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := newOrchestrator(t)
	o.ManifestKey = &owner.PublicKey
	srv := httptest.NewServer(o.Handler())
	defer srv.Close()
	put := func(m *manifest.Manifest, sig string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, srv.URL+PathManifest, bytes.NewReader(m.JSON()))
		if sig != "" {
			req.Header.Set(HeaderManifestSignature, sig)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	sign := func(m *manifest.Manifest, k *ecdsa.PrivateKey) string {
		s, err := manifest.Sign(m, k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := testManifest(shPlugin("app", "sleep 60", "Always"))
	evil := testManifest(shPlugin("app", "sleep 61", "Always"))

	for name, sig := range map[string]string{
		"unsigned":                      "",
		"signed by a stranger":          sign(evil, stranger),
		"signed for the other manifest": sign(good, owner),
		"not base64":                    "!!",
	} {
		if code, body := put(evil, sig); code != http.StatusForbidden || !strings.Contains(body, "not signed by the key the enclave image carries") {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}
	if st := o.Status(); st.Manifest != "" || len(st.Plugins) != 0 {
		t.Fatalf("a refused manifest ran: %+v", st)
	}
	if code, body := put(good, sign(good, owner)); code != http.StatusOK {
		t.Fatalf("the owner's manifest: %d %s", code, body)
	}
	if code, _ := put(evil, sign(evil, stranger)); code != http.StatusForbidden || o.Status().Manifest != good.ManifestDigest() {
		t.Errorf("a stranger's manifest after the owner's: %d, runs %s", code, o.Status().Manifest)
	}
}
