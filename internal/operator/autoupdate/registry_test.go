package autoupdate

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pullSecret(name, config string) corev1.Secret {
	return corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(config)}}
}

func TestKeychain(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("robot:s3cret"))
	kc, err := Keychain([]corev1.Secret{
		pullSecret("first", `{"auths":{"https://registry.example/v1/":{"auth":"`+auth+`"}}}`),
		pullSecret("second", `{"auths":{"other.example":{"username":"u","password":"p"},"registry.example":{"username":"late","password":"x"}}}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{"registry.example": "robot:s3cret", "other.example": "u:p", "nowhere.example": ""} {
		repo, _ := name.NewRepository(host + "/img")
		a, err := kc.Resolve(repo)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := a.Authorization()
		if got := cfg.Username + ":" + cfg.Password; (want == "" && a != authn.Anonymous) || (want != "" && got != want) {
			t.Errorf("%s: %s, want %s", host, got, want)
		}
	}
	// Refused by name, never quoting the secret.
	for _, s := range []corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "opaque"}, Type: corev1.SecretTypeOpaque},
		pullSecret("broken", `{"auths":{"r":{"auth":"s3cret-value"}},"credsStore":"s3cret-value"}`),
		pullSecret("big", `{"auths":{"r":{"auth":"`+strings.Repeat("a", maxDockerConfig)+`"}}}`),
	} {
		_, err := Keychain([]corev1.Secret{s})
		if err == nil || !strings.Contains(err.Error(), "pull secret "+s.Name) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
}

func FuzzKeychain(f *testing.F) {
	f.Add([]byte(`{"auths":{"r.example":{"auth":"dTpw"}}}`), "r.example")
	f.Add([]byte(`{"auths":{"https://r.example/v2/":{"username":"u","password":"p"}}}`), "r.example")
	f.Fuzz(func(t *testing.T, config []byte, host string) {
		kc, err := Keychain([]corev1.Secret{pullSecret("s", string(config))})
		if err != nil {
			return
		}
		repo, err := name.NewRepository(host+"/img", name.WeakValidation)
		if err != nil {
			return
		}
		if a, err := kc.Resolve(repo); err == nil && a == nil {
			t.Fatal("no authenticator and no error")
		}
	})
}

func FuzzParseLine(f *testing.F) {
	f.Add("ghcr.io/cloister-cc/cloister-las:v1.2.3", "v1.2.4")
	f.Add("r:5000/x:1.0.0@sha256:00", "v1.0.10")
	f.Fuzz(func(t *testing.T, image, tag string) {
		l, err := ParseLine(image)
		if err != nil {
			return
		}
		got, newer := l.Newest([]string{tag})
		if newer && got != tag {
			t.Fatalf("newer, yet %q is not the tag given", got)
		}
		if !newer && got != l.Tag {
			t.Fatalf("not newer, yet %q replaces %q", got, l.Tag)
		}
	})
}
