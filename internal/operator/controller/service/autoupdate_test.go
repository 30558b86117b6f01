package service

import (
	"context"
	"crypto/ecdsa"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/autoupdate"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/workload/imagesig"
)

// privateRegistry is a registry (go-containerregistry's, in memory, over
// HTTPS) that answers only with the user and password u:p, and the
// transport that trusts it.
func privateRegistry(t *testing.T) (string, http.RoundTripper) {
	t.Helper()
	return testenv.TLSRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte("u:p")) {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
}

// pushTag pushes a random image as host/repo:tag over tr and returns its
// digest.
func pushTag(t *testing.T, tr http.RoundTripper, host, repo, tag string) string {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.NewTag(host + "/" + repo + ":" + tag)
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "u", Password: "p"}), remote.WithTransport(tr)); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	return d.String()
}

// sign pushes a signature of host/repo@digest by key, as cosign stores
// it.
func sign(t *testing.T, tr http.RoundTripper, host, repo, digest string, key *ecdsa.PrivateKey) {
	t.Helper()
	ref, err := name.NewDigest(host + "/" + repo + "@" + digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := imagesig.Sign(context.Background(), ref, key, remote.WithAuth(&authn.Basic{Username: "u", Password: "p"}), remote.WithTransport(tr)); err != nil {
		t.Fatal(err)
	}
}

// noAutoUpdateKind is testKind for a service spec.autoUpdate never moves
// (as CAS).
type noAutoUpdateKind struct{ testKind }

func (noAutoUpdateKind) NoAutoUpdate() {}

// spec.autoUpdate: the newest tag of the image's line (not another line)
// is read with the CR's pull secret and rolled out by digest, once its
// signature by the operator's image key is found, with the choice and its
// source in the status and an event; a newer tag pushed later is taken at
// the next check, not before the interval; an unsigned one, or one signed
// by another key, is refused in the status; a kind that never updates
// (CAS) keeps its image whatever the registry holds.
func TestAutoUpdateFollowsTheNewestOfTheLine(t *testing.T) {
	f := newFixture(t, "autoupdate")
	host, tr := privateRegistry(t)
	key, err := imagesig.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	f.r.Images, f.r.ImageKey = &autoupdate.Resolver{Transport: tr}, &key.PublicKey
	pushTag(t, tr, host, "svc", "v1.2.3")
	newest := pushTag(t, tr, host, "svc", "v1.2.5")
	sign(t, tr, host, "svc", newest, key)
	pushTag(t, tr, host, "svc", "v1.3.0")
	pushTag(t, tr, host, "svc", "v1.2.6-rc.1")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "pull"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + host + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("u:p")) + `"}}}`)}}
	if err := f.client.Create(f.ctx, secret); err != nil {
		t.Fatal(err)
	}
	cr := f.newCR("followed")
	cr.Spec.Image, cr.Spec.AutoUpdate = host+"/svc:v1.2.3", true
	cr.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	if err := f.client.Update(f.ctx, cr); err != nil {
		t.Fatal(err)
	}
	want := host + "/svc:v1.2.5@" + newest
	f.until(cr, func() bool { return f.owned(cr) != nil && f.owned(cr).Data["image"] == want }, "the release to run "+want)
	au := cr.Status.AutoUpdate
	if au == nil || au.Image != want || au.Previous != host+"/svc:v1.2.3" || au.Source != host+"/svc" || au.UpdatedAt == nil || au.Message != "" {
		t.Errorf("status.autoUpdate %+v", au)
	}
	if f.events.countOf(cr.Name, health.EventAutoUpdated) != 1 {
		t.Errorf("events %v, want one AutoUpdated", f.events.take())
	}

	// A newer patch release: not read again before the interval, then
	// rolled out.
	later := pushTag(t, tr, host, "svc", "v1.2.7")
	sign(t, tr, host, "svc", later, key)
	f.reconcile(cr)
	if img := f.owned(cr).Data["image"]; img != want {
		t.Errorf("the registry was read again within the interval: %s", img)
	}
	f.clock.SetTime(f.clock.Now().Add(DefaultAutoUpdateInterval))
	f.until(cr, func() bool { return f.owned(cr).Data["image"] == host+"/svc:v1.2.7@"+later }, "v1.2.7")
	if f.get(cr); cr.Status.AutoUpdate.Previous != want {
		t.Errorf("previous %s, want %s", cr.Status.AutoUpdate.Previous, want)
	}

	// A tag nobody signed, then one signed by another key: refused, said
	// in the status, the image stays; signed by the key, it is taken.
	unsigned := pushTag(t, tr, host, "svc", "v1.2.8")
	f.clock.SetTime(f.clock.Now().Add(DefaultAutoUpdateInterval))
	f.until(cr, func() bool {
		return cr.Status.AutoUpdate != nil && strings.Contains(cr.Status.AutoUpdate.Message, "no valid signature by the given key")
	}, "the unsigned tag refused in the status")
	if img := f.owned(cr).Data["image"]; img != host+"/svc:v1.2.7@"+later {
		t.Errorf("an unsigned tag was taken: %s", img)
	}
	other, err := imagesig.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	sign(t, tr, host, "svc", unsigned, other)
	f.clock.SetTime(f.clock.Now().Add(DefaultAutoUpdateInterval))
	f.until(cr, func() bool {
		return strings.Contains(cr.Status.AutoUpdate.Message, "a signature by another key")
	}, "the tag signed by another key refused in the status")
	if img := f.owned(cr).Data["image"]; img != host+"/svc:v1.2.7@"+later {
		t.Errorf("a tag signed by another key was taken: %s", img)
	}
	sign(t, tr, host, "svc", unsigned, key)
	f.clock.SetTime(f.clock.Now().Add(DefaultAutoUpdateInterval))
	f.until(cr, func() bool { return f.owned(cr).Data["image"] == host+"/svc:v1.2.8@"+unsigned }, "v1.2.8 once signed")
	later = unsigned

	// An operator without the key takes nothing.
	f.r.ImageKey = nil
	pushTag(t, tr, host, "svc", "v1.2.9")
	f.clock.SetTime(f.clock.Now().Add(DefaultAutoUpdateInterval))
	f.until(cr, func() bool {
		return cr.Status.AutoUpdate != nil && strings.Contains(cr.Status.AutoUpdate.Message, "it has none")
	}, "no key said in the status")
	if img := f.owned(cr).Data["image"]; img != host+"/svc:v1.2.8@"+later {
		t.Errorf("an operator without a key moved the image to %s", img)
	}
	f.r.ImageKey = &key.PublicKey

	// Without the pull secret the registry refuses: the status says so
	// and the image stays.
	f.get(cr)
	cr.Spec.ImagePullSecrets = nil
	if err := f.client.Update(f.ctx, cr); err != nil {
		t.Fatal(err)
	}
	f.clock.SetTime(f.clock.Now().Add(DefaultAutoUpdateInterval))
	f.until(cr, func() bool {
		return cr.Status.AutoUpdate != nil && strings.Contains(strings.ToLower(cr.Status.AutoUpdate.Message), "unauthorized")
	}, "the refusal in the status")
	if img := f.owned(cr).Data["image"]; img != host+"/svc:v1.2.8@"+later {
		t.Errorf("a failed check moved the image to %s", img)
	}

	// A registry in plain HTTP (one on a private address or a .local
	// name, which go-containerregistry would read so) is not read: the
	// status says so and the image stays.
	plain := testenv.Registry(t, nil)
	pushTag(t, http.DefaultTransport, plain, "svc", "v1.0.0")
	pushTag(t, http.DefaultTransport, plain, "svc", "v1.0.1")
	f.get(cr)
	cr.Spec.Image = plain + "/svc:v1.0.0"
	if err := f.client.Update(f.ctx, cr); err != nil {
		t.Fatal(err)
	}
	f.clock.SetTime(f.clock.Now().Add(DefaultAutoUpdateInterval))
	f.until(cr, func() bool {
		return cr.Status.AutoUpdate != nil && strings.Contains(cr.Status.AutoUpdate.Message, "HTTPS only")
	}, "the plain-HTTP registry refused in the status")
	if img := f.owned(cr).Data["image"]; strings.Contains(img, "@") {
		t.Errorf("an image resolved over plain HTTP: %s", img)
	}

	// autoUpdate off: the spec's image again, and no status.
	f.get(cr)
	cr.Spec.AutoUpdate = false
	if err := f.client.Update(f.ctx, cr); err != nil {
		t.Fatal(err)
	}
	f.until(cr, func() bool { return f.owned(cr).Data["image"] == plain+"/svc:v1.0.0" && cr.Status.AutoUpdate == nil }, "the spec's image")

	// A kind that is never updated (CAS) keeps its image.
	g := newFixture(t, "autoupdate-never")
	g.r.Images = &autoupdate.Resolver{Transport: tr}
	g.r.Kind = &noAutoUpdateKind{testKind{Base{ChartData: testChart()}}}
	never := g.newCR("never")
	never.Spec.Image, never.Spec.AutoUpdate = host+"/svc:v1.2.3", true
	if err := g.client.Update(g.ctx, never); err != nil {
		t.Fatal(err)
	}
	g.until(never, func() bool { return g.owned(never) != nil && never.Status.State == "HEALTHY" }, "HEALTHY")
	if img := g.owned(never).Data["image"]; img != host+"/svc:v1.2.3" || never.Status.AutoUpdate != nil || g.events.countOf(never.Name, health.EventAutoUpdated) != 0 {
		t.Errorf("a kind that is never updated runs %s, status %+v", img, never.Status.AutoUpdate)
	}
}

// until reconciles cr until ok holds (reading cr again each pass).
func (f *fixture) until(cr *basev1beta1.LAS, ok func() bool, what string) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := f.r.Reconcile(context.Background(), reqFor(cr)); err != nil {
			f.t.Fatalf("reconcile: %v", err)
		}
		f.get(cr)
		if ok() {
			return
		}
	}
	f.t.Fatalf("waiting for %s: status %+v, autoUpdate %+v", what, cr.Status, cr.Status.AutoUpdate)
}
