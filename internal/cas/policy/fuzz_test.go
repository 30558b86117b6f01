package policy

import (
	"strings"
	"testing"
)

// Whatever a policy document holds, Parse returns a valid document or an
// error; a valid one's canonical form parses to the same digest, so what
// owners sign is stable.
func FuzzParse(f *testing.F) {
	f.Add([]byte(doc(f, []string{ownerPEM(f)})))
	f.Add([]byte("version: cloister.dev/policy/v1\nname: team\nowners: {keys: []}\nservices: []\n"))
	f.Add([]byte(`{"version":"cloister.dev/policy/v1","name":"a/b","services":[]}`))
	f.Add([]byte(doc(f, []string{ownerPEM(f)}, func(s string) string {
		return strings.Replace(s, "  env:\n", "  workloadSecretID: shop/orders\n  env:\n    KEY: \"{{ .WorkloadSecret.Base64 }}\"\n", 1)
	})))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse(data)
		if err != nil {
			return
		}
		again, err := Parse(d.Canonical())
		if err != nil {
			t.Fatalf("the canonical form of %q does not parse: %v", data, err)
		}
		if again.Digest() != d.Digest() {
			t.Fatalf("%q: the canonical form has another digest", data)
		}
	})
}

// Whatever is sent as an encrypted policy, Decrypt opens only what was
// sealed to the key, unchanged (the AEAD's promise, whatever spelling of
// its base64 arrives).
func FuzzDecrypt(f *testing.F) {
	key, err := NewEncryptionKey([]byte(strings.Repeat("k", 32)))
	if err != nil {
		f.Fatal(err)
	}
	sealed, err := Encrypt(&Signed{Policy: "version: cloister.dev/policy/v1\n", Link: Link{Version: 1}}, key.PublicKey())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed.Policy, sealed.EncryptionKey)
	f.Add("AAAA", sealed.EncryptionKey)
	f.Add(sealed.Policy, "not a key")
	f.Fuzz(func(t *testing.T, policy, encryptionKey string) {
		s, err := Decrypt(&Encrypted{Policy: policy, EncryptionKey: encryptionKey}, key)
		if err != nil {
			return
		}
		if s.Policy != "version: cloister.dev/policy/v1\n" || s.Version != 1 {
			t.Fatalf("opened %q as %+v", policy, s)
		}
	})
}
