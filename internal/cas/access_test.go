package cas_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// The value of the plain secret the owner gives CAS; no read may return
// it, in any encoding.
const plainValue = "correct-horse-battery-staple"

// An encrypted policy with a plain secret: nobody without an owner's key
// reads its document, nobody at all reads the secret's value; the owner's
// signed read returns the document; the workload still gets the value.
func TestReadsByAccess(t *testing.T) {
	c, url, ca := readyCASAt(t)
	owner, _ := policy.NewKey()
	doc := func(read string) string {
		return `version: cloister.dev/policy/v1
name: vault
owners: {keys: ["` + pemKey(owner) + `"]}
` + read + `
allowSimulation: true
services: [{name: api, attestation: {identities: []}, certificate: {sans: [api.vault.svc]}, env: {PASSWORD: "{{ .Secrets.password.Raw }}"}, secrets: [password]}]
secrets: [{name: password, kind: plain, value: ` + base64.StdEncoding.EncodeToString([]byte(plainValue)) + `}]
`
	}
	pk, err := c.PublicKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	casKey, _ := policy.DecodePublicKey(pk.EncryptionKey)
	seal := func(text string) wire.PolicyRequest {
		s := &policy.Signed{Policy: text, Link: policy.Link{Version: 1}}
		for _, k := range []*ecdsa.PrivateKey{owner, castest.BoardKey()} {
			if err := policy.Sign(s, k); err != nil {
				t.Fatal(err)
			}
		}
		e, err := policy.Encrypt(s, casKey)
		if err != nil {
			t.Fatal(err)
		}
		return wire.PolicyRequest{Policy: e.Policy, EncryptionKey: e.EncryptionKey}
	}
	// An encrypted policy cannot be made readable by anyone.
	var apiErr *casclient.APIError
	if _, err := c.RegisterPolicy(context.Background(), seal(doc("read: any"))); !errors.As(err, &apiErr) || apiErr.Status != 400 || !strings.Contains(apiErr.Message, "came encrypted, so only its owners may read it") {
		t.Errorf("an encrypted policy with read: any: %v", err)
	}
	if _, err := c.RegisterPolicy(context.Background(), seal(doc(""))); err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}}}
	for _, path := range []string{"/v1/policies/vault", "/v1/policies/vault/history"} {
		resp, err := anon.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		if bytes.Contains(body, []byte("api.vault.svc")) {
			t.Errorf("GET %s without an owner's signature shows the document: %s", path, body)
		}
		noSecret(t, "GET "+path, body)
	}
	// The public record still verifies, and says who signed what.
	h, err := c.History(context.Background(), "vault")
	if err != nil {
		t.Fatal(err)
	}
	key, _ := policy.ParsePublicKey([]byte(h.HistoryKey))
	if err := wire.VerifyHistory(h.Records, key); err != nil || h.Records[0].Policy != "" || h.Records[0].Read != policy.ReadOwners || len(h.Records[0].Signatures) != 2 { // the owner's and the board's
		t.Errorf("the public history: %+v, %v", h.Records, err)
	}

	// The owner's signed read: the document, without the value.
	h, err = c.ReadHistory(context.Background(), "vault", owner)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Records) != 1 || !strings.Contains(h.Records[0].Policy, "api.vault.svc") || !h.Records[0].Redacted {
		t.Fatalf("the owner's read: %+v", h.Records)
	}
	if err := wire.VerifyHistory(h.Records, key); err != nil {
		t.Errorf("the owner's history: %v", err)
	}
	raw, _ := json.Marshal(h)
	noSecret(t, "the owner's read", raw)

	// Anyone else's signature, or a challenge CAS did not make, reads
	// nothing.
	stranger, _ := policy.NewKey()
	if _, err := c.ReadHistory(context.Background(), "vault", stranger); !errors.As(err, &apiErr) || apiErr.Status != 403 || !strings.Contains(apiErr.Message, "is not an owner") {
		t.Errorf("a stranger's read: %v", err)
	}
	forged, _ := wire.SignRead(owner, "vault", base64.RawURLEncoding.EncodeToString(make([]byte, 56)))
	b, _ := json.Marshal(forged)
	resp, err := anon.Post(url+"/v1/policies/vault/read", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "challenge: not one this CAS made") {
		t.Errorf("a forged challenge: %d %s", resp.StatusCode, body)
	}

	// The workload gets the value it was given for.
	res, err := attestOpen(t, c, simRequest(t, "vault", "api", nil))
	if err != nil || res.Env["PASSWORD"] != plainValue {
		t.Errorf("the workload's secret: %v", err)
	}

	// A captured request replayed over HTTPS: CAS answers (it keeps no
	// state to tell), but the answer holds the secret only sealed to the
	// key the evidence binds, which the replayer does not have.
	req := simRequest(t, "vault", "api", nil)
	if _, err := attestOpen(t, c, req); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(req)
	resp, err = anon.Post(url+"/v1/attest", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || bytes.Contains(body, []byte(`"env"`)) || bytes.Contains(body, []byte(`"secrets"`)) {
		t.Errorf("a replayed attestation: %d %s", resp.StatusCode, body)
	}
	noSecret(t, "a replayed attestation", body)
	var replayed wire.AttestResult
	if err := json.Unmarshal(body, &replayed); err != nil || len(replayed.Sealed) == 0 {
		t.Fatalf("a replayed attestation: %v", err)
	}
	thief, _ := policy.NewKey()
	if err := replayed.Open(thief, "vault", "api"); err == nil {
		t.Error("the replayer's own key opened what CAS sealed")
	}
}

// A manifest with read: any is readable by anyone, as cloister verify
// needs it.
func TestReadAnyIsPublic(t *testing.T) {
	c := readyCAS(t)
	owner, _ := policy.NewKey()
	doc := `version: cloister.dev/policy/v1
name: manifest
owners: {keys: ["` + pemKey(owner) + `"]}
read: any
allowSimulation: true
services: [{name: web, attestation: {identities: []}, certificate: {sans: [web.shop.svc]}}]
`
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, doc, owner)); err != nil {
		t.Fatal(err)
	}
	cur, err := c.Policy(context.Background(), "manifest")
	if err != nil || cur.Policy != doc || cur.Read != policy.ReadAny {
		t.Errorf("the public record of a read: any policy: %+v, %v", cur, err)
	}
}

func noSecret(t *testing.T, what string, body []byte) {
	t.Helper()
	for _, enc := range []string{plainValue, base64.StdEncoding.EncodeToString([]byte(plainValue)), base64.RawStdEncoding.EncodeToString([]byte(plainValue))} {
		if bytes.Contains(body, []byte(enc)) {
			t.Errorf("%s returns the plain secret's value (as %q)", what, enc)
		}
	}
}
