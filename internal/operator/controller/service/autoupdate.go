package service

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/autoupdate"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// ImageResolver finds the newest image of a version line in its registry
// and checks its signature there (autoupdate.Resolver).
type ImageResolver interface {
	Newest(ctx context.Context, l autoupdate.Line, keychain authn.Keychain) (autoupdate.Result, error)
	Verify(ctx context.Context, image string, pub *ecdsa.PublicKey, keychain authn.Keychain) error
}

// ErrNoImageKey: autoUpdate follows only images signed by the key the
// operator was installed with, and it has none.
var ErrNoImageKey = errors.New("autoUpdate follows only images signed by the operator's image signature key, and it has none " +
	"(the operator chart's imageSignatureKey, which cloister install sets to the key it verified the operator's image with)")

// DefaultAutoUpdateInterval is how often spec.autoUpdate reads the
// registry.
const DefaultAutoUpdateInterval = 10 * time.Minute

func (r *Reconciler) autoUpdateInterval() time.Duration {
	if r.AutoUpdateInterval > 0 {
		return r.AutoUpdateInterval
	}
	return DefaultAutoUpdateInterval
}

// autoUpdate puts the newest image of the release's image line into rreq
// when the CR asks for it, reading the registry at most once an interval,
// and records in the status what it chose; an update is an event. It
// returns how soon to look again (0: never).
func (r *Reconciler) autoUpdate(ctx context.Context, obj Object, rreq *release.Request) time.Duration {
	spec, st := obj.GetServiceSpec(), obj.GetServiceStatus()
	if _, never := r.Kind.(NoAutoUpdate); never || !spec.AutoUpdate || r.Images == nil {
		st.AutoUpdate = nil
		return 0
	}
	image, _ := rreq.Values["image"].(string)
	line, err := autoupdate.ParseLine(image)
	if err != nil {
		st.AutoUpdate = &common.AutoUpdateStatus{Message: err.Error()}
		return 0
	}
	au := &common.AutoUpdateStatus{}
	if st.AutoUpdate != nil {
		au = st.AutoUpdate.DeepCopy()
	}
	if !onLine(au.Image, line) {
		// Another line (spec.image changed): start again from it.
		au = &common.AutoUpdateStatus{}
	}
	now := r.now()
	interval := r.autoUpdateInterval()
	if au.CheckedAt == nil || now.Sub(au.CheckedAt.Time) >= interval || au.CheckedAt.After(now) {
		r.checkRegistry(ctx, obj, rreq.Namespace, line, image, au, now)
	}
	if au.Image != "" {
		rreq.Values["image"] = au.Image
	}
	st.AutoUpdate = au
	return max(interval-now.Sub(au.CheckedAt.Time), time.Second)
}

// checkRegistry reads the newest image of line into au.
func (r *Reconciler) checkRegistry(ctx context.Context, obj Object, ns string, line autoupdate.Line, image string, au *common.AutoUpdateStatus, now time.Time) {
	at := metav1.NewTime(now)
	au.CheckedAt, au.Message, au.Source = &at, "", line.Repository
	keychain, err := r.pullSecrets(ctx, ns, obj.GetServiceSpec().ImagePullSecrets)
	if err != nil {
		au.Message = err.Error()
		return
	}
	res, err := r.Images.Newest(ctx, line, keychain)
	if err != nil {
		au.Message = err.Error()
		return
	}
	au.Source = res.Source
	if !res.Newer || res.Image == au.Image {
		return
	}
	// A tag is whatever the registry (or whoever writes to it) says: the
	// node agents run privileged, so only what the install key signed.
	if r.ImageKey == nil {
		au.Message = fmt.Sprintf("%s not taken: %v", res.Image, ErrNoImageKey)
		return
	}
	if err := r.Images.Verify(ctx, res.Image, r.ImageKey, keychain); err != nil {
		au.Message = fmt.Sprintf("%s not taken: %v", res.Image, err)
		return
	}
	au.Previous = au.Image
	if au.Previous == "" {
		au.Previous = image
	}
	au.Image, au.UpdatedAt = res.Image, &at
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, string(health.EventAutoUpdated), "AutoUpdate",
		"%s replaces %s: the newest %s of %s", au.Image, au.Previous, versionLine(line), res.Source)
}

// onLine says whether image, an earlier choice, is of line and not older
// than its own tag.
func onLine(image string, line autoupdate.Line) bool {
	if image == "" {
		return true
	}
	l, err := autoupdate.ParseLine(image)
	if err != nil || l.Repository != line.Repository {
		return false
	}
	newest, newer := line.Newest([]string{l.Tag})
	return newer || newest == l.Tag
}

func versionLine(l autoupdate.Line) string {
	v := l.Tag
	if i := strings.LastIndexByte(v, '.'); i > 0 {
		v = v[:i]
	}
	return fmt.Sprintf("%s.x release", v)
}

// pullSecrets reads the CR's pull secrets from the release's namespace
// into a keychain.
func (r *Reconciler) pullSecrets(ctx context.Context, ns string, refs []corev1.LocalObjectReference) (authn.Keychain, error) {
	secrets := make([]corev1.Secret, 0, len(refs))
	for _, ref := range refs {
		var s corev1.Secret
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &s); err != nil {
			return nil, fmt.Errorf("reading pull secret %s/%s: %w", ns, ref.Name, err)
		}
		secrets = append(secrets, s)
	}
	return autoupdate.Keychain(secrets)
}
