package vaultinit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

func TestRecoveryKeysOpenOnlyForTheirOwner(t *testing.T) {
	a, _ := policy.NewKey()
	b, _ := policy.NewKey()
	owners := []string{string(policy.MarshalPublicKey(&a.PublicKey)), string(policy.MarshalPublicKey(&b.PublicKey))}
	bundle, err := SealRecovery("shop/secrets", [][]byte{[]byte("key-a"), []byte("key-b")}, owners, 2)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(bundle)
	if strings.Contains(string(data), "key-a") || strings.Contains(string(data), "a2V5LWE") {
		t.Fatal("a recovery key in plain text in the bundle")
	}
	parsed, err := ParseBundle(data)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := parsed.Open(a); err != nil || string(k) != "key-a" {
		t.Errorf("owner a: %q %v", k, err)
	}
	if k, err := parsed.Open(b); err != nil || string(k) != "key-b" {
		t.Errorf("owner b: %q %v", k, err)
	}
	stranger, _ := policy.NewKey()
	if _, err := parsed.Open(stranger); err == nil || !strings.Contains(err.Error(), "no recovery key of owner") {
		t.Errorf("a stranger: %v", err)
	}
	// A's share moved into another Vault's bundle does not open there.
	parsed.Vault = "shop/other"
	if _, err := parsed.Open(a); err == nil {
		t.Error("a share opened for another Vault")
	}
}

func TestParseBundleRefuses(t *testing.T) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	for name, in := range map[string]string{
		"unknown field": `{"version":"` + BundleVersion + `","vault":"a/b","threshold":1,"shares":[{"owner":"` + fp + `","sealed":"AA=="}],"extra":1}`,
		"version":       `{"version":"v0","vault":"a/b","threshold":1,"shares":[{"owner":"` + fp + `","sealed":"AA=="}]}`,
		"threshold":     `{"version":"` + BundleVersion + `","vault":"a/b","threshold":2,"shares":[{"owner":"` + fp + `","sealed":"AA=="}]}`,
		"no shares":     `{"version":"` + BundleVersion + `","vault":"a/b","threshold":1,"shares":[]}`,
		"owner":         `{"version":"` + BundleVersion + `","vault":"a/b","threshold":1,"shares":[{"owner":"me","sealed":"AA=="}]}`,
		"too big":       strings.Repeat(" ", MaxBundle+1),
		"not json":      `{`,
	} {
		if _, err := ParseBundle([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseBundle(f *testing.F) {
	f.Add([]byte(`{"version":"` + BundleVersion + `","vault":"a/b","threshold":1,"shares":[{"owner":"sha256:` + strings.Repeat("ab", 32) + `","sealed":"AA=="}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBundle(data)
		if err != nil {
			return
		}
		if b.Threshold < 1 || b.Threshold > len(b.Shares) || b.Vault == "" {
			t.Fatalf("accepted %+v", b)
		}
	})
}
