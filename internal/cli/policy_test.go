package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// keygen makes an owner key in dir and returns its file and public PEM.
func keygen(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	file := filepath.Join(dir, name)
	out, _, err := run(t, "policy", "keygen", "--out", file)
	if err != nil {
		t.Fatal(err)
	}
	return file, out
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ")
}

func TestPolicySignTwoOwnersAndEncrypt(t *testing.T) {
	dir := t.TempDir()
	alice, alicePub := keygen(t, dir, "alice.pem")
	bob, bobPub := keygen(t, dir, "bob.pem")
	if info, _ := os.Stat(alice); info.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", info.Mode().Perm())
	}
	if _, _, err := run(t, "policy", "keygen", "--out", alice); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Errorf("keygen over an existing key: %v", err)
	}
	doc := `version: cloister.dev/policy/v1
name: shop
owners:
  threshold: 2
  keys:
  - |
` + indent(alicePub) + `
  - |
` + indent(bobPub) + `
allowSimulation: true
services:
- name: web
  attestation: {identities: []}
  certificate: {sans: [web.shop.svc]}
`
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, _, err := run(t, "policy", "sign", "--key", alice, file); err == nil || !strings.Contains(err.Error(), "say which version this is") {
		t.Errorf("signing with no version: %v", err)
	}
	out, _, err := run(t, "policy", "sign", "--key", alice, "--version", "1", "--cas-address", "https://cas.prod:8081", file)
	if err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(dir, "signed-by-alice.yaml")
	if err := os.WriteFile(first, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "policy", "sign", "--key", bob, "--version", "2", first); err == nil || !strings.Contains(err.Error(), "its version is signed already") {
		t.Errorf("a second version for a SignedPolicy: %v", err)
	}
	out, _, err = run(t, "policy", "sign", "--key", bob, first)
	if err != nil {
		t.Fatal(err)
	}
	var sp casv1beta1.SignedPolicy
	if err := yaml.UnmarshalStrict([]byte(out), &sp); err != nil {
		t.Fatalf("output is no SignedPolicy: %v\n%s", err, out)
	}
	if sp.Kind != "SignedPolicy" || sp.Name != "shop" || sp.Spec.CASAddress != "https://cas.prod:8081" || len(sp.Spec.Signatures) != 2 || sp.Spec.Version != 1 || sp.Spec.Predecessor != "" {
		t.Fatalf("resource %+v", sp)
	}
	d, _ := policy.Parse([]byte(sp.Spec.Policy))
	keys, _ := d.OwnerKeys()
	var sigs []policy.Signature
	for _, s := range sp.Spec.Signatures {
		sigs = append(sigs, policy.Signature{Signer: s.Signer, Signature: s.Signature})
	}
	if signers, err := policy.Signers(d, policy.Link{Version: 1}, sigs, keys); err != nil || len(signers) != 2 {
		t.Fatalf("signers %v, %v: want both owners", signers, err)
	}
	// The next version, after the SignedPolicy of this one.
	both := filepath.Join(dir, "v1.yaml")
	if err := os.WriteFile(both, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "policy", "sign", "--key", alice, "--after", both, "--name", "shop-v2", file)
	var v2 casv1beta1.SignedPolicy
	if err != nil || yaml.UnmarshalStrict([]byte(out), &v2) != nil || v2.Spec.Version != 2 || v2.Spec.Predecessor != d.Digest() {
		t.Fatalf("signed --after v1: %v\n%s", err, out)
	}

	casKey, _ := policy.NewEncryptionKey([]byte("0123456789abcdef0123456789abcdef"))
	keyFile := filepath.Join(dir, "cas.key")
	if err := os.WriteFile(keyFile, []byte(policy.EncodePublicKey(casKey.PublicKey())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "policy", "encrypt", "--key", alice, "--version", "1", "--cas-public-key", keyFile, file)
	if err != nil {
		t.Fatal(err)
	}
	var ep casv1beta1.EncryptedPolicy
	if err := yaml.UnmarshalStrict([]byte(out), &ep); err != nil || ep.Kind != "EncryptedPolicy" || ep.Name != "shop" || ep.Spec.CASAddress != defaultCASAddress {
		t.Fatalf("EncryptedPolicy %+v, %v", ep, err)
	}
	if strings.Contains(out, "web.shop.svc") {
		t.Error("the encrypted resource shows the policy")
	}
	opened, err := policy.Decrypt(&policy.Encrypted{Policy: ep.Spec.Policy, EncryptionKey: ep.Spec.EncryptionKey}, casKey)
	if err != nil || opened.Policy != doc || len(opened.Signatures) != 1 || opened.Version != 1 {
		t.Fatalf("decrypted %+v, %v", opened, err)
	}
}

func TestPolicyBadInput(t *testing.T) {
	dir := t.TempDir()
	key, _ := keygen(t, dir, "k.pem")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: cloister.dev/policy/v1\nname: x\nowners: {keys: []}\nallowSimulation: true\nservices: [{name: a, attestation: {identities: []}, certificate: {sans: []}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("version: cloister.dev/policy/v1\nname: x\nowners: {keys: []}\nallowSimulation: true\nservices: [{name: a, attestation: {identities: []}, certificate: {sans: [a]}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notKey := filepath.Join(dir, "not-a-key")
	if err := os.WriteFile(notKey, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "keygen"}, "--out is required"},
		{[]string{"policy", "sign", bad}, "--key is required"},
		{[]string{"policy", "sign", "--key", notKey, bad}, "--key " + notKey + ": not PEM"},
		{[]string{"policy", "sign", "--key", key, bad}, "certificate.sans: none"},
		{[]string{"policy", "sign", "--key", key, "--version", "2", "--predecessor", "abc", good}, "--version/--predecessor: predecessor: \"abc\""},
		{[]string{"policy", "sign", "--key", key, "--after", good, good}, "--after " + good + ": not a SignedPolicy"},
		{[]string{"policy", "encrypt", "--key", key, bad}, "--cas-public-key FILE, --cas URL or --cluster NAMESPACE/NAME is required"},
		{[]string{"policy", "encrypt", "--key", key, "--cas-public-key", notKey, bad}, "--cas-public-key " + notKey},
	} {
		_, _, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
