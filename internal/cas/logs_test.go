package cas_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/collateral/collateraltest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// No secret reaches CAS's log or its error answers: not the init token
// (right or wrong), not a plain secret's value, not a generated secret,
// not the Intel DCAP API key (which a PCS refuses here, so CAS reports the
// failure), through a journey that refuses and accepts each kind of
// request.
func TestNoSecretsInLogsOrErrors(t *testing.T) {
	logs := &testenv.Buffer{}
	dir := t.TempDir()
	pcs := collateraltest.RealPCS(t)
	pcs.Key = strings.Repeat("e", 32)
	const dcapKey = "0badc0de0badc0de0badc0de0badc0de"
	keyFile := filepath.Join(t.TempDir(), "dcap-api-key")
	if err := os.WriteFile(keyFile, []byte(dcapKey), 0o600); err != nil {
		t.Fatal(err)
	}
	url, caFile, _ := castest.StartLogged(t, cas.Config{StateDir: dir, Sealer: "none", Simulation: true, SimKeys: castest.LASPubFile(t),
		PCS: pcs.URL, DCAPKeyFile: keyFile}, logs)
	ca, _ := os.ReadFile(caFile)
	c, err := casclient.New(url, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	token := castest.InitToken(t, dir)
	secrets := []string{token, plainValue, base64.StdEncoding.EncodeToString([]byte(plainValue)), "a-guessed-init-token", dcapKey}
	var answers []string
	note := func(err error) {
		if err != nil {
			answers = append(answers, err.Error())
		}
	}
	recovery, _ := policy.NewKey()
	owners := []string{string(policy.MarshalPublicKey(&recovery.PublicKey))}
	_, err = c.Init(context.Background(), owners, 1, "a-guessed-init-token")
	note(err)
	if _, err := c.Init(context.Background(), owners, 1, token, castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	owner, _ := policy.NewKey()
	doc := `version: cloister.dev/policy/v1
name: vault
owners: {keys: ["` + pemKey(owner) + `"]}
allowSimulation: true
services: [{name: api, attestation: {identities: []}, certificate: {sans: [api.vault.svc]}, env: {PASSWORD: "{{ .Secrets.password.Raw }}", KEY: "{{ .Secrets.key.Hex }}"}, secrets: [password, key]}]
secrets: [{name: password, kind: plain, value: ` + base64.StdEncoding.EncodeToString([]byte(plainValue)) + `}, {name: key, kind: symmetric-key}]
`
	_, err = c.RegisterPolicy(context.Background(), wire.PolicyRequest{Policy: strings.Replace(doc, "kind: plain", "kind: plainn", 1), Link: policy.Link{Version: 1}})
	note(err)
	stranger, _ := policy.NewKey()
	_, err = c.RegisterPolicy(context.Background(), sign(t, c, doc, stranger))
	note(err)
	if _, err := c.RegisterPolicy(context.Background(), sign(t, c, doc, owner)); err != nil {
		t.Fatal(err)
	}
	res, err := attestOpen(t, c, simRequest(t, "vault", "api", nil))
	if err != nil || res.Env["PASSWORD"] != plainValue {
		t.Fatalf("attest: %v", err)
	}
	secrets = append(secrets, res.Env["KEY"], res.Secrets["key"]["Base64"])
	_, err = attestOpen(t, c, simRequest(t, "vault", "nope", nil))
	note(err)
	// Real SGX evidence makes CAS ask the PCS, which refuses its key.
	sgxQuote, _ := collateraltest.RealQuotes(t)
	sgxReq := simRequest(t, "vault", "api", nil)
	sgxReq.Evidence = attest.Evidence{Type: attest.SGX, Raw: sgxQuote.Raw}
	_, err = attestOpen(t, c, sgxReq)
	if err == nil || !strings.Contains(err.Error(), "key is missing or wrong") {
		t.Errorf("SGX evidence with a key the PCS refuses: %v", err)
	}
	note(err)
	if keys := pcs.Keys(); len(keys) == 0 || keys[0] != dcapKey {
		t.Errorf("the PCS saw keys %q, want CAS's", keys)
	}
	_, err = c.ReadHistory(context.Background(), "vault", stranger)
	note(err)
	h, err := c.ReadHistory(context.Background(), "vault", owner)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(h)
	answers = append(answers, string(raw))
	var apiErr *casclient.APIError
	if _, err := c.Init(context.Background(), owners, 1, token); !errors.As(err, &apiErr) || apiErr.Reason != wire.ReasonInitialized {
		t.Errorf("a second init: %v", err)
	}
	if !strings.Contains(logs.String(), "audit: init refused") || !strings.Contains(logs.String(), "audit: policy refused") {
		t.Fatalf("the journey was not logged:\n%s", logs)
	}
	for _, s := range secrets {
		if s == "" {
			t.Fatal("an empty secret to look for")
		}
		if strings.Contains(logs.String(), s) {
			t.Errorf("CAS's log holds a secret (%.6s...)", s)
		}
		for _, a := range answers {
			if strings.Contains(a, s) {
				t.Errorf("an answer holds a secret (%.6s...): %.200s", s, a)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, cas.InitTokenFile)); !os.IsNotExist(err) {
		t.Errorf("the used init token is still in the state folder: %v", err)
	}
}
