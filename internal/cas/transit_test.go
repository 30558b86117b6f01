package cas_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	wrapping "github.com/hashicorp/go-kms-wrapping/v2"
	transitwrapper "github.com/hashicorp/go-kms-wrapping/wrappers/transit/v2"

	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/transit"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// transitPolicy is policy vault: service server with transit key unseal
// at version (and minDecryptionVersion min), admitting mrenclave 11..
// (and 22.. unless dropped); service web without transit keys.
func transitPolicy(owner *ecdsa.PrivateKey, version, min int, dropped bool) string {
	ids := `[{type: sgx, mrenclave: "` + strings.Repeat("11", 32) + `"}, {type: sgx, mrenclave: "` + strings.Repeat("22", 32) + `"}]`
	if dropped {
		ids = `[{type: sgx, mrenclave: "` + strings.Repeat("22", 32) + `"}]`
	}
	return `version: cloister.dev/policy/v1
name: vault
owners: {keys: ["` + pemKey(owner) + `"]}
allowSimulation: true
services:
- {name: server, attestation: {identities: ` + ids + `}, certificate: {sans: [vault.team.svc]},
   files: {/vault/seal.hcl: "tls_server_name = \"{{ .CAS.ServerName }}\""},
   transit: {keys: [{name: unseal, version: ` + fmt.Sprint(version) + `, minDecryptionVersion: ` + fmt.Sprint(min) + `}]}}
- {name: web, attestation: {identities: ` + ids + `}, certificate: {sans: [web.team.svc]}}
`
}

// vaultClient speaks to CAS as Vault's transit seal does (PUT, no
// content type, Vault's error shape), with the TLS client certificate
// cert, if any, trusting CAS as the seal is told to: by CAS's root CA
// (tls_ca_cert) under CAS's trust domain (tls_server_name).
type vaultClient struct {
	t    *testing.T
	base string
	http *http.Client
}

// casTrust is how a workload of a CAS trusts it: its root CA, under its
// trust domain.
type casTrust struct {
	rootCA     []byte
	serverName string
}

func newVaultClient(t *testing.T, url string, trust casTrust, cert *tls.Certificate) *vaultClient {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(trust.rootCA)
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: trust.serverName}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &vaultClient{t: t, base: url, http: &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}}
}

func (v *vaultClient) do(op, key string, body any) (map[string]string, int, string) {
	v.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPut, v.base+"/v1/transit/"+op+"/"+key, bytes.NewReader(raw))
	req.Header.Set("X-Vault-Request", "true")
	res, err := v.http.Do(req)
	if err != nil {
		return nil, 0, err.Error()
	}
	defer func() { _ = res.Body.Close() }()
	out, _ := io.ReadAll(res.Body)
	var ok transit.Response
	if res.StatusCode == http.StatusOK && json.Unmarshal(out, &ok) == nil {
		return ok.Data, res.StatusCode, ""
	}
	var bad transit.ErrorResponse
	_ = json.Unmarshal(out, &bad)
	return nil, res.StatusCode, strings.Join(bad.Errors, "; ")
}

func (v *vaultClient) encrypt(key string, plaintext []byte) (string, int, string) {
	data, code, msg := v.do("encrypt", key, transit.EncryptRequest{Plaintext: base64.StdEncoding.EncodeToString(plaintext)})
	return data["ciphertext"], code, msg
}

func (v *vaultClient) decrypt(key, ciphertext string) ([]byte, int, string) {
	data, code, msg := v.do("decrypt", key, transit.DecryptRequest{Ciphertext: ciphertext})
	pt, _ := base64.StdEncoding.DecodeString(data["plaintext"])
	return pt, code, msg
}

// clientCert attests service of policy vault and returns its certificate
// and key, and how it trusts CAS, as the initializer writes them for the
// Vault.
func clientCert(t *testing.T, c *casclient.Client, service string) (*tls.Certificate, casTrust) {
	t.Helper()
	req := simRequest(t, "vault", service, nil)
	res, err := attestOpen(t, c, req)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := requestKeys.Load(string(req.CSR))
	var chain [][]byte
	for rest := []byte(res.Certificate); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		chain = append(chain, block.Bytes)
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		t.Fatal(err)
	}
	id, err := wire.CertMeshID(leaf)
	if err != nil {
		t.Fatal(err)
	}
	// The server name the Vault's seal checks comes in a file CAS renders
	// for it, where no host can change it.
	if hcl, ok := res.Files["/vault/seal.hcl"]; ok && hcl != `tls_server_name = "`+id.TrustDomain+`"` {
		t.Fatalf("the seal's file: %q, want CAS's trust domain %s", hcl, id.TrustDomain)
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, casTrust{rootCA: []byte(res.RootCA), serverName: id.TrustDomain}
}

// CAS serves Vault's transit seal to the service whose attested
// certificate the client presents, and to nobody else: no certificate,
// another service's, a forged one with the same identity, the right one
// without its key, or one whose measurement the owners have since removed
// get nothing. Rotation: a raised version encrypts anew, and the versions
// below minDecryptionVersion no longer decrypt. A restarted CAS derives
// the same keys from its seed.
func TestTransitSeal(t *testing.T) {
	dir := t.TempDir()
	var logs testenv.Buffer
	cfg := cas.Config{StateDir: dir, Sealer: "file:" + filepath.Join(dir, "seed"), Simulation: true, SimKeys: castest.LASPubFile(t)}
	url, caFile, stop := castest.StartLogged(t, cfg, &logs)
	c, _ := initAt(t, url, caFile)
	owner, _ := policy.NewKey()
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, transitPolicy(owner, 1, 0, false), owner)); err != nil {
		t.Fatal(err)
	}
	server, trust := clientCert(t, c, "server")
	vault := newVaultClient(t, url, trust, server)
	ct, code, msg := vault.encrypt("unseal", []byte("the root key"))
	if code != http.StatusOK || !strings.HasPrefix(ct, "vault:v1:") {
		t.Fatalf("encrypt: %d %s %q", code, msg, ct)
	}
	if pt, code, msg := vault.decrypt("unseal", ct); code != http.StatusOK || string(pt) != "the root key" {
		t.Fatalf("decrypt: %d %s %q", code, msg, pt)
	}

	// CAS answers under its trust domain with a certificate from its root
	// CA; under any other name, with the replica's own, which the seal's
	// trust does not take.
	if _, _, msg := newVaultClient(t, url, casTrust{rootCA: trust.rootCA, serverName: "localhost"}, server).decrypt("unseal", ct); !strings.Contains(msg, "certificate") {
		t.Errorf("CAS under another name: %s, want the handshake refused", msg)
	}
	if _, _, msg := newVaultClient(t, url, casTrust{rootCA: trust.rootCA, serverName: "cas-0000000000000000.cloister"}, server).decrypt("unseal", ct); msg == "" {
		t.Error("CAS answered under another CAS's trust domain")
	}

	// Nobody else.
	web, _ := clientCert(t, c, "web")
	forged := forgeLike(t, server.Leaf)
	wrongKey := *server
	wrongKey.PrivateKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, tc := range map[string]struct {
		cert *tls.Certificate
		code int
		says string
	}{
		"no certificate":                {nil, http.StatusForbidden, "present the service's certificate"},
		"another service's certificate": {web, http.StatusNotFound, `transit key "unseal" of service web`},
		"a forged certificate":          {forged, http.StatusForbidden, "not a workload certificate of this CAS"},
	} {
		if _, code, msg := newVaultClient(t, url, trust, tc.cert).decrypt("unseal", ct); code != tc.code || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %d %s, want %d %q", name, code, msg, tc.code, tc.says)
		}
	}
	if _, code, msg := newVaultClient(t, url, trust, &wrongKey).decrypt("unseal", ct); code != 0 || msg == "" {
		t.Errorf("the certificate without its key: %d %s, want the handshake refused", code, msg)
	}
	if _, code, msg := vault.decrypt("other", ct); code != http.StatusNotFound || !strings.Contains(msg, `transit key "other"`) {
		t.Errorf("a key the service lacks: %d %s", code, msg)
	}

	// Rotation.
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, transitPolicy(owner, 2, 2, false), owner)); err != nil {
		t.Fatal(err)
	}
	ct2, code, msg := vault.encrypt("unseal", []byte("the root key"))
	if code != http.StatusOK || !strings.HasPrefix(ct2, "vault:v2:") {
		t.Fatalf("encrypt after rotation: %d %s %q", code, msg, ct2)
	}
	if _, code, msg := vault.decrypt("unseal", ct); code != http.StatusForbidden || !strings.Contains(msg, "versions 2 to 2, not 1") {
		t.Errorf("a retired version: %d %s", code, msg)
	}
	forgedVersion := strings.Replace(ct2, "vault:v2:", "vault:v1:", 1)
	if _, code, _ := vault.decrypt("unseal", forgedVersion); code == http.StatusOK {
		t.Error("a ciphertext relabelled to another version decrypted")
	}

	// The same keys after a restart.
	stop()
	url, caFile, stop = castest.StartLogged(t, cfg, &logs)
	defer stop()
	ca, _ := os.ReadFile(caFile)
	vault = newVaultClient(t, url, trust, server)
	if pt, code, msg := vault.decrypt("unseal", ct2); code != http.StatusOK || string(pt) != "the root key" {
		t.Fatalf("decrypt after a restart: %d %s %q", code, msg, pt)
	}

	// The owners remove the measurement the certificate was issued for.
	c, _ = casclient.New(url, ca, nil)
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, transitPolicy(owner, 2, 2, true), owner)); err != nil {
		t.Fatal(err)
	}
	if _, code, msg := vault.decrypt("unseal", ct2); code != http.StatusForbidden || !strings.Contains(msg, "no longer admits") {
		t.Errorf("a certificate of a removed measurement: %d %s", code, msg)
	}
	// Each operation is counted by its result.
	// (Read by CAS's own certificate, as a scraper pins it.)
	res, err := newVaultClient(t, url, casTrust{rootCA: ca}, nil).http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	series, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	for _, want := range []string{`cloister_cas_transit_total{op="decrypt",result="done"} 1`, `cloister_cas_transit_total{op="decrypt",result="refused"} 1`} {
		if !strings.Contains(string(series), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// What the seal wraps never reaches CAS's log; each operation is
	// audited by service and key.
	out := logs.String()
	for _, secret := range []string{"the root key", base64.StdEncoding.EncodeToString([]byte("the root key"))} {
		if strings.Contains(out, secret) {
			t.Errorf("CAS logged %q", secret)
		}
	}
	if !strings.Contains(out, `"msg":"audit: transit","op":"encrypt","policy":"vault","service":"server","key":"unseal","version":1`) {
		t.Errorf("no audit line of the first encryption in:\n%s", out)
	}
}

// forgeLike is a self-signed certificate with leaf's identities and a
// key of its own.
func forgeLike(t *testing.T, leaf *x509.Certificate) *tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: leaf.Subject.CommonName}, URIs: leaf.URIs, DNSNames: leaf.DNSNames,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		ExtraExtensions: claimsOf(leaf)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// claimsOf is leaf's attested claims extension.
func claimsOf(leaf *x509.Certificate) []pkix.Extension {
	for _, e := range leaf.Extensions {
		if e.Id.Equal(pki.ClaimsOID) {
			return []pkix.Extension{e}
		}
	}
	return nil
}

// Vault's own transit seal wrapper (go-kms-wrapping, as Vault and OpenBao
// link it) seals and unseals through CAS, configured as the policy's file
// tells it: CAS's address, its root CA and server name, the service's
// certificate, no token; another service's certificate gets nothing.
func TestTransitWithVaultsSealWrapper(t *testing.T) {
	dir := t.TempDir()
	url, caFile, _ := castest.Start(t, dir, "none")
	c, _ := initAt(t, url, caFile)
	owner, _ := policy.NewKey()
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, transitPolicy(owner, 1, 0, false), owner)); err != nil {
		t.Fatal(err)
	}
	// The wrapper encrypts once as it is configured, to learn the key id.
	wrapper := func(service string) (*transitwrapper.Wrapper, error) {
		cert, trust := clientCert(t, c, service)
		files := map[string][]byte{"root-ca.pem": trust.rootCA}
		for _, der := range cert.Certificate {
			files["cert.pem"] = append(files["cert.pem"], pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		files["key.pem"] = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
		out := filepath.Join(dir, service)
		if err := os.MkdirAll(out, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(out, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		w := transitwrapper.NewWrapper()
		_, err = w.SetConfig(context.Background(), wrapping.WithConfigMap(map[string]string{
			"address": url, "mount_path": "transit", "key_name": "unseal", "disable_renewal": "true",
			"tls_ca_cert": filepath.Join(out, "root-ca.pem"), "tls_client_cert": filepath.Join(out, "cert.pem"),
			"tls_client_key": filepath.Join(out, "key.pem"), "tls_server_name": trust.serverName,
		}))
		return w, err
	}
	w, err := wrapper("server")
	if err != nil {
		t.Fatalf("configuring Vault's seal: %v", err)
	}
	blob, err := w.Encrypt(context.Background(), []byte("the root key"))
	if err != nil {
		t.Fatalf("Vault's seal encrypting through CAS: %v", err)
	}
	if keyID, _ := w.KeyId(context.Background()); keyID != "v1" || blob.KeyInfo.KeyId != "v1" {
		t.Errorf("key id %q, %q: want the version, v1", keyID, blob.KeyInfo.KeyId)
	}
	if pt, err := w.Decrypt(context.Background(), blob); err != nil || string(pt) != "the root key" {
		t.Fatalf("Vault's seal decrypting through CAS: %q %v", pt, err)
	}
	if _, err := wrapper("web"); err == nil || !strings.Contains(err.Error(), `transit key "unseal" of service web`) {
		t.Errorf("another service's seal: %v", err)
	}
}
