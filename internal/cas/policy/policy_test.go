package policy

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
)

// doc builds a valid policy owned by keys; edits change its YAML lines.
func doc(t testing.TB, ownerPEMs []string, edits ...func(string) string) string {
	t.Helper()
	var keys strings.Builder
	for _, k := range ownerPEMs {
		keys.WriteString("  - |\n")
		for _, line := range strings.Split(strings.TrimSpace(k), "\n") {
			keys.WriteString("    " + line + "\n")
		}
	}
	y := `version: cloister.dev/policy/v1
name: payments
owners:
  threshold: 1
  keys:
` + keys.String() + `services:
- name: api
  attestation:
    identities:
    - type: sgx
      mrenclave: ` + strings.Repeat("ab", 32) + `
  certificate:
    sans: [api.payments.svc, 10.0.0.7]
    validity: 12h
  env:
    DB_KEY: "{{ .Secrets.dbKey.Hex }}"
  files:
    /etc/api/tls.pem: "{{ .Secrets.tls.Cert }}"
  secrets: [dbKey, tls]
secrets:
- name: dbKey
  kind: symmetric-key
- name: tls
  kind: ecdsa-cert
- name: token
  kind: plain
  value: c2VjcmV0
`
	for _, e := range edits {
		y = e(y)
	}
	return y
}

// rsaSecrets lists n RSA certificate secrets.
func rsaSecrets(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "- name: rsa%d\n  kind: rsa-cert\n  size: 4096\n", i)
	}
	return b.String()
}

// replace replaces the first of each old with its new: pairs are old,
// new, old, new...
func replace(pairs ...string) func(string) string {
	return func(s string) string {
		for i := 0; i+1 < len(pairs); i += 2 {
			s = strings.Replace(s, pairs[i], pairs[i+1], 1)
		}
		return s
	}
}

func ownerPEM(t testing.TB) string {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return string(MarshalPublicKey(&k.PublicKey))
}

func TestParseValid(t *testing.T) {
	d, err := Parse([]byte(doc(t, []string{ownerPEM(t)})))
	if err != nil {
		t.Fatal(err)
	}
	api := d.Service("api")
	if api == nil || api.CertificateValidity().Hours() != 12 || d.OwnerThreshold() != 1 || d.Secret("dbKey").KeySize() != 32 || d.Secret("tls").KeySize() != 256 {
		t.Errorf("parsed %+v", d)
	}
	if p := d.Policy(api); p.AllowSimulation || len(p.Identities) != 1 {
		t.Errorf("attest policy %+v", p)
	}

	// Transit keys, found by name.
	d, err = Parse([]byte(doc(t, []string{ownerPEM(t)}, replace("  env:\n", "  transit: {keys: [{name: unseal, version: 3, minDecryptionVersion: 2}]}\n  env:\n"))))
	if err != nil {
		t.Fatal(err)
	}
	if k := d.Service("api").TransitKey("unseal"); k == nil || k.Version != 3 || k.MinDecryptionVersion != 2 || d.Service("api").TransitKey("other") != nil {
		t.Errorf("transit key %+v", k)
	}

	// A name in a namespace, a mesh peer in one, and a namespace's own
	// policy, which has no services.
	d, err = Parse([]byte(doc(t, []string{ownerPEM(t)}, replace("name: payments", "name: bank/payments"),
		replace("  env:\n", "  mesh: {allow: [bank/payments/*, bank/web/api, web/api]}\n  env:\n"))))
	if err != nil || d.Name != "bank/payments" || Namespace(d.Name) != "bank" || !Within(d.Name, "bank") || Within("bank", "bank") {
		t.Fatalf("a namespaced name: %v", err)
	}
	ns := "version: cloister.dev/policy/v1\nname: bank\nowners:\n  keys:\n  - |\n" + strings.ReplaceAll(strings.TrimSpace(ownerPEM(t)), "\n", "\n    ") + "\nservices: []\n"
	if _, err := Parse([]byte(strings.Replace(ns, "  - |\n", "  - |\n    ", 1))); err != nil {
		t.Errorf("a namespace's policy without services: %v", err)
	}
}

func TestParseRejects(t *testing.T) {
	owner := ownerPEM(t)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	edDER, _ := x509.MarshalPKIXPublicKey(edPub)
	edKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: edDER}))
	for _, tc := range []struct {
		name string
		edit func(string) string
		keys []string
		want string
	}{
		{"unknown field", replace("name: payments", "name: payments\ndescription: x"), nil, `unknown field "description"`},
		{"wrong version", replace("cloister.dev/policy/v1", "v2"), nil, `version: "v2", want "cloister.dev/policy/v1"`},
		{"bad name", replace("name: payments", "name: Payments_1"), nil, `name: "Payments_1"`},
		{"two namespaces deep", replace("name: payments", "name: bank/payments/eu"), nil, `name: "bank/payments/eu": use NAME or NAMESPACE/NAME`},
		{"empty namespace", replace("name: payments", "name: /payments"), nil, `name: "/payments"`},
		{"empty name in a namespace", replace("name: payments", "name: bank/"), nil, `name: "bank/"`},
		{"namespace of 64 characters", replace("name: payments", "name: "+strings.Repeat("b", 64)+"/payments"), nil, `at most 63 characters`},
		{"allow of a policy two namespaces deep", replace("  env:\n", "  mesh: {allow: [bank/payments/eu/api]}\n  env:\n"), nil, `mesh.allow[0]: "bank/payments/eu/api"`},
		{"a SAN of CAS's own domain", replace("sans: [api.payments.svc", "sans: [cas-0123456789abcdef.cloister"), nil, `certificate.sans[0]: "cas-0123456789abcdef.cloister": names under .cloister are CAS's own`},
		{"transit without keys", replace("  env:\n", "  transit: {keys: []}\n  env:\n"), nil, "transit.keys: 0 keys"},
		{"transit key twice", replace("  env:\n", "  transit: {keys: [{name: unseal, version: 1}, {name: unseal, version: 2}]}\n  env:\n"), nil, `transit.keys[1].name: "unseal" twice`},
		{"transit key version 0", replace("  env:\n", "  transit: {keys: [{name: unseal, version: 0}]}\n  env:\n"), nil, "transit.keys[0].version: 0"},
		{"transit min decryption above the version", replace("  env:\n", "  transit: {keys: [{name: unseal, version: 2, minDecryptionVersion: 3}]}\n  env:\n"), nil, "transit.keys[0].minDecryptionVersion: 3"},
		{"transit key name", replace("  env:\n", "  transit: {keys: [{name: Unseal, version: 1}]}\n  env:\n"), nil, `transit.keys[0].name: "Unseal"`},
		{"transit unknown field", replace("  env:\n", "  transit: {keys: [{name: unseal, version: 1, type: rsa}]}\n  env:\n"), nil, `unknown field "type"`},
		{"nine RSA keys", replace("- name: tls\n  kind: ecdsa-cert\n", strings.Repeat("- name: tls\n  kind: ecdsa-cert\n", 1)+rsaSecrets(9)), nil, "secrets: 10 certificates, 9 of them RSA: at most 32, and 8 RSA"},
		{"unknown read access", replace("name: payments", "name: payments\nread: everyone"), nil, `read: "everyone": use owners`},
		{"a threshold without owners", nil, []string{}, "owners.threshold: 1, but no owner keys"},
		{"owner key twice", nil, []string{owner, owner}, "owners.keys[1]: the same key as an earlier one"},
		{"Ed25519 owner key", nil, []string{edKey}, "owners.keys[0]: a ed25519.PublicKey key: want ECDSA P-256"},
		{"threshold above the keys", replace("threshold: 1", "threshold: 2"), nil, "owners.threshold: 2, want 1..1"},
		{"no identities without simulation", replace("    identities:\n    - type: sgx\n      mrenclave: "+strings.Repeat("ab", 32)+"\n", "    identities: []\n"), nil, "attestation.identities: none"},
		{"short MRENCLAVE", replace(strings.Repeat("ab", 32), "abcd"), nil, "services[0] (api): attestation: identities[0]: mrenclave has 2 bytes"},
		{"an SEV-SNP pod without host data", replace("    - type: sgx\n      mrenclave: "+strings.Repeat("ab", 32)+"\n", "    - type: snp\n      measurement: "+strings.Repeat("ab", 48)+"\n"), nil,
			"services[0] (api): attestation.identities[0]: an snp identity without hostData: every pod of its runtime class meets it"},
		{"a TD by its MRTD only", replace("    - type: sgx\n      mrenclave: "+strings.Repeat("ab", 32)+"\n", "    - type: tdx\n      mrtd: "+strings.Repeat("ab", 48)+"\n      mrConfigID: "+strings.Repeat("cd", 48)+"\n"), nil,
			"services[0] (api): attestation.identities[0]: a tdx identity with 0 RTMRs: pin RTMR0 to RTMR2"},
		{"a TD without its pod policy", replace("    - type: sgx\n      mrenclave: "+strings.Repeat("ab", 32)+"\n", "    - type: tdx\n      mrtd: "+strings.Repeat("ab", 48)+"\n      rtmr: ['"+strings.Repeat("01", 48)+"', '"+strings.Repeat("02", 48)+"', '"+strings.Repeat("03", 48)+"']\n"), nil,
			"services[0] (api): attestation.identities[0]: a tdx identity without mrConfigID"},
		{"misspelt TCB status", replace("    identities:", "    acceptTCB: [UpTodate]\n    identities:"), nil, `acceptTCB[0]: unknown TCB status "UpTodate"`},
		{"bad SAN", replace("api.payments.svc", "api payments"), nil, `certificate.sans[0]: "api payments" is neither`},
		{"no SANs", replace("sans: [api.payments.svc, 10.0.0.7]", "sans: []"), nil, "certificate.sans: none"},
		{"validity too long", replace("validity: 12h", "validity: 9000h"), nil, `certificate.validity: "9000h"`},
		{"unlisted secret in a template", replace("{{ .Secrets.dbKey.Hex }}", "{{ .Secrets.token.Hex }}"), nil, "env DB_KEY: "},
		{"field the kind lacks", replace("{{ .Secrets.tls.Cert }}", "{{ .Secrets.dbKey.Cert }}"), nil, "files /etc/api/tls.pem: "},
		{"workload secret without an id", replace("{{ .Secrets.dbKey.Hex }}", "{{ .WorkloadSecret.Hex }}"), nil, `executing "env DB_KEY" at <.WorkloadSecret.Hex>: map has no entry for key "Hex" (a service reads only the secrets it lists, and .WorkloadSecret only with a workloadSecretID)`},
		{"workload secret field a key lacks", replace("  env:\n", "  workloadSecretID: db\n  env:\n", "{{ .Secrets.dbKey.Hex }}", "{{ .WorkloadSecret.Cert }}"), nil, `at <.WorkloadSecret.Cert>: map has no entry for key "Cert"`},
		{"workload secret id with a space", replace("  env:\n", "  workloadSecretID: my db\n  env:\n"), nil, `services[0] (api): workloadSecretID: "my db": use letters, digits, '.', '_', '-' and '/'`},
		{"workload secret id from a slash", replace("  env:\n", "  workloadSecretID: /db\n  env:\n"), nil, `workloadSecretID: "/db"`},
		{"workload secret id too long", replace("  env:\n", "  workloadSecretID: "+strings.Repeat("d", 254)+"\n  env:\n"), nil, "at most 253 characters"},
		{"unknown secret listed", replace("secrets: [dbKey, tls]", "secrets: [dbKey, tls, nope]"), nil, `secrets[2]: "nope" is not among the policy's secrets`},
		{"relative file path", replace("/etc/api/tls.pem", "etc/tls.pem"), nil, `files: "etc/tls.pem": use a clean absolute path`},
		{"bad env name", replace("DB_KEY:", "DB-KEY:"), nil, `env: "DB-KEY" is not a variable name`},
		{"unknown secret kind", replace("kind: symmetric-key", "kind: password"), nil, `secrets[0] (dbKey): kind: "password"`},
		{"odd key size", replace("kind: symmetric-key", "kind: symmetric-key\n  size: 20"), nil, "size: 20, use one of [16 24 32 64]"},
		{"plain without value", replace("  value: c2VjcmV0\n", ""), nil, "a plain secret needs its value"},
		{"generated secret with a value", replace("kind: symmetric-key", "kind: symmetric-key\n  value: c2VjcmV0"), nil, "only a plain secret has one"},
		{"secret name with a dash", replace("- name: dbKey", "- name: db-key"), nil, "secrets[0] (db-key): name: start with a letter"},
		{"service twice", replace("secrets:\n- name: dbKey", "- name: api\n  attestation: {identities: [{type: nitro}]}\n  certificate: {sans: [a]}\nsecrets:\n- name: dbKey"), nil, "services[1] (api): name used twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := tc.keys
			if keys == nil {
				keys = []string{owner}
			}
			var edits []func(string) string
			if tc.edit != nil {
				edits = append(edits, tc.edit)
			}
			_, err := Parse([]byte(doc(t, keys, edits...)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant %q", err, tc.want)
			}
		})
	}
}

// YAML layout, comments and key order do not change what is signed.
func TestCanonical(t *testing.T) {
	owner := ownerPEM(t)
	a, err := Parse([]byte(doc(t, []string{owner})))
	if err != nil {
		t.Fatal(err)
	}
	reordered := doc(t, []string{owner}, replace("name: payments\n", "# the payments team's policy\n"), replace("version: cloister.dev/policy/v1\n", "version: cloister.dev/policy/v1\nname: payments\n"))
	b, err := Parse([]byte(reordered))
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() {
		t.Errorf("digests differ:\n%s\n%s", a.Canonical(), b.Canonical())
	}
	c, _ := Parse([]byte(doc(t, []string{owner}, replace("validity: 12h", "validity: 11h"))))
	if c.Digest() == a.Digest() {
		t.Error("a changed validity has the same digest")
	}
}

// Redacted drops exactly the plain secrets' values, and never changes the
// document it was made from.
func TestRedacted(t *testing.T) {
	d := &Document{Secrets: []Secret{{Name: "a", Kind: Plain, Value: []byte("v")}, {Name: "b", Kind: SymmetricKey}}}
	r, removed := d.Redacted()
	if !removed || r.Secrets[0].Value != nil || d.Secrets[0].Value == nil || r.Secrets[1].Name != "b" {
		t.Errorf("redacted %+v (removed %v), original %+v", r.Secrets, removed, d.Secrets)
	}
	if _, removed := r.Redacted(); removed {
		t.Error("a redacted document had values left")
	}
}

// A field added to the document never changes the canonical form (and so
// the digest every owner signed) of a policy that does not use it, as the
// signed sample in config/samples also shows; one that uses it is part
// of it, and is validated.
func TestNewFieldsKeepOldDigests(t *testing.T) {
	const doc = "version: cloister.dev/policy/v1\nname: shop\nowners: {keys: []}\nservices:\n- name: web\n  attestation: {identities: [{type: sgx, mrenclave: \"" +
		"1111111111111111111111111111111111111111111111111111111111111111\"}]}\n  certificate: {sans: [web.shop.svc]}\n"
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if c := string(d.Canonical()); strings.Contains(c, "mesh") {
		t.Errorf("a policy without a mesh section has one in its canonical form: %s", c)
	}
	m, err := Parse([]byte(doc + "  mesh: {allow: [billing/*]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Digest() == d.Digest() || !strings.Contains(string(m.Canonical()), `"mesh":{"allow":["billing/*"]}`) {
		t.Errorf("the mesh section is not part of the canonical form: %s", m.Canonical())
	}
	if _, err := Parse([]byte(doc + "  mesh: {allow: [\"billing\"]}\n")); err == nil || !strings.Contains(err.Error(), "mesh.allow[0]") {
		t.Errorf("a malformed allow entry: %v", err)
	}
	w, err := Parse([]byte(doc + "  workloadSecretID: shop/web\n  files: {/secret: \"{{ .WorkloadSecret.Hex }}\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(d.Canonical()), "workloadSecretID") || !strings.Contains(string(w.Canonical()), `"workloadSecretID":"shop/web"`) {
		t.Errorf("the workload secret id is not part of the canonical form, or is in one without it: %s", w.Canonical())
	}
}
