package transit

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func key(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// A ciphertext opens only under the key and reference it was made with,
// and has the shape Vault's seal reads its key id from (three fields,
// "vN" in the middle).
func TestEncryptDecrypt(t *testing.T) {
	k := key(t)
	ref := KeyRef{Policy: "vault", Service: "server", Name: "unseal", Version: 3}
	ct, err := Encrypt(k, ref, []byte("the root key"))
	if err != nil {
		t.Fatal(err)
	}
	if parts := strings.Split(ct, ":"); len(parts) != 3 || parts[0] != "vault" || parts[1] != "v3" {
		t.Fatalf("ciphertext %q", ct)
	}
	version, blob, err := ParseCiphertext(ct)
	if err != nil || version != 3 {
		t.Fatalf("ParseCiphertext: %d %v", version, err)
	}
	if pt, err := Decrypt(k, ref, blob); err != nil || string(pt) != "the root key" {
		t.Fatalf("Decrypt: %q %v", pt, err)
	}
	again, _ := Encrypt(k, ref, []byte("the root key"))
	if again == ct {
		t.Error("two encryptions of one plaintext are equal: the nonce is not fresh")
	}
	for name, other := range map[string]struct {
		key []byte
		ref KeyRef
	}{
		"another key":     {key(t), ref},
		"another version": {k, KeyRef{Policy: "vault", Service: "server", Name: "unseal", Version: 2}},
		"another service": {k, KeyRef{Policy: "vault", Service: "other", Name: "unseal", Version: 3}},
		"another policy":  {k, KeyRef{Policy: "vault2", Service: "server", Name: "unseal", Version: 3}},
	} {
		if _, err := Decrypt(other.key, other.ref, blob); !errors.Is(err, ErrCiphertext) {
			t.Errorf("%s opens it: %v", name, err)
		}
	}
	flipped := bytes.Clone(blob)
	flipped[len(flipped)-1] ^= 1
	if _, err := Decrypt(k, ref, flipped); !errors.Is(err, ErrCiphertext) {
		t.Errorf("a changed ciphertext opens: %v", err)
	}
	if _, err := Encrypt(k, ref, make([]byte, MaxPlaintext+1)); err == nil {
		t.Error("a plaintext over the limit was encrypted")
	}
	if _, err := Encrypt(k[:16], ref, nil); err == nil {
		t.Error("a 16-byte key was taken")
	}
}

// Labels never collide: a name cannot borrow a slash from another.
func TestLabelsAreUnambiguous(t *testing.T) {
	a := KeyRef{Policy: "a/b", Service: "c", Name: "k", Version: 1}.Label()
	b := KeyRef{Policy: "a", Service: "b/c", Name: "k", Version: 1}.Label()
	c := KeyRef{Policy: "a", Service: "b/c", Name: "k", Version: 11}.Label()
	if a == b || b == c {
		t.Errorf("labels collide: %q %q %q", a, b, c)
	}
}

func TestParseCiphertextRefuses(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(make([]byte, nonceSize+tagSize))
	for _, bad := range []string{
		"", "vault:v1", "vault:v1:" + good + ":x", "other:v1:" + good, "vault:1:" + good, "vault:v0:" + good, "vault:v01:" + good,
		"vault:v-1:" + good, "vault:v1048577:" + good, "vault:v1:" + strings.TrimRight(good, "="), "vault:v1:" + base64.StdEncoding.EncodeToString(make([]byte, 27)),
		"vault:v1:" + strings.Repeat("A", maxCiphertext),
	} {
		if _, _, err := ParseCiphertext(bad); !errors.Is(err, ErrCiphertext) {
			t.Errorf("%.40q: %v", bad, err)
		}
	}
}

func TestDecodeRequests(t *testing.T) {
	if pt, err := DecodeEncrypt([]byte(`{"plaintext":"` + base64.StdEncoding.EncodeToString([]byte("key")) + `"}`)); err != nil || string(pt) != "key" {
		t.Errorf("encrypt: %q %v", pt, err)
	}
	for _, bad := range []string{
		`{"plaintext":"a2V5","context":"x"}`, `{"plaintext":"a2V5"} {}`, `{"plaintext":"a2V5="}`, `{"plaintext":"%%%"}`, `[]`,
		`{"plaintext":"` + strings.Repeat("A", int(MaxRequest)) + `"}`,
		`{"plaintext":"` + base64.StdEncoding.EncodeToString(make([]byte, MaxPlaintext+1)) + `"}`,
	} {
		if _, err := DecodeEncrypt([]byte(bad)); err == nil {
			t.Errorf("encrypt %.50q taken", bad)
		}
	}
	k := key(t)
	ref := KeyRef{Policy: "p", Service: "s", Name: "unseal", Version: 1}
	ct, _ := Encrypt(k, ref, []byte("x"))
	body, _ := json.Marshal(DecryptRequest{Ciphertext: ct})
	if v, blob, err := DecodeDecrypt(body); err != nil || v != 1 || len(blob) == 0 {
		t.Errorf("decrypt: %d %v", v, err)
	}
	for _, bad := range []string{`{"ciphertext":"` + ct + `","key_version":1}`, `{"ciphertext":"vault:v1:x"}`, `{}`} {
		if _, _, err := DecodeDecrypt([]byte(bad)); err == nil {
			t.Errorf("decrypt %.50q taken", bad)
		}
	}
}

// Whatever a client sends, parsing answers without panicking, takes only
// bounded input, and what it takes round-trips.
func FuzzDecodeDecrypt(f *testing.F) {
	f.Add([]byte(`{"ciphertext":"vault:v1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`))
	f.Add([]byte(`{"ciphertext":"vault:v99:"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		version, blob, err := DecodeDecrypt(body)
		if err != nil {
			return
		}
		if version < 1 || version > MaxVersion || len(blob) < nonceSize+tagSize || len(blob) > MaxPlaintext+nonceSize+tagSize {
			t.Fatalf("took version %d, %d bytes", version, len(blob))
		}
	})
}

func FuzzDecodeEncrypt(f *testing.F) {
	f.Add([]byte(`{"plaintext":"a2V5"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		pt, err := DecodeEncrypt(body)
		if err == nil && len(pt) > MaxPlaintext {
			t.Fatalf("took %d bytes", len(pt))
		}
	})
}
