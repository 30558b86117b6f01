// Package webhookcert keeps the operator's webhook serving certificate
// without cert-manager: open-policy-agent/cert-controller makes a CA and a
// serving certificate in a Secret, renews the certificate before it
// expires and patches the CA into the webhook configurations' caBundle;
// this package serves whatever the Secret holds, read through the API
// (not a mounted volume, which the kubelet refreshes up to a minute late),
// so a renewed certificate is served as soon as it is written.
//
// The CA lives ten years by default and is what caBundle names, so a
// renewed serving certificate needs no caBundle change and no request
// fails during the switch. A CA renewal (a new caBundle) leaves a window,
// milliseconds long, in which the API server trusts the new CA while a
// replica still serves the old certificate.
package webhookcert

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The rotator lists and watches webhook configurations and updates the
// operator's own; the Secret is in the operator's namespace.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=update;patch,resourceNames=cloister-operator
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=get;list;watch;create;update,namespace=cloister-system

// Options say where the certificate lives and what it is for.
type Options struct {
	// Secret holds ca.crt, ca.key, tls.crt and tls.key.
	Secret types.NamespacedName
	// DNSName is the name the API server calls the webhook by
	// (<service>.<namespace>.svc, or localhost beside the cluster).
	DNSName string
	// Validating and Mutating name the webhook configurations whose
	// caBundle is kept.
	Validating, Mutating []string
	// CertDir receives tls.crt and tls.key as they change (cert-controller
	// checks that they arrived).
	CertDir string
	// Validity of the serving certificate; renewed when a third of it is
	// left. Zero means a year.
	Validity time.Duration
	// CAValidity; zero means ten years.
	CAValidity time.Duration
	// Rotate: the operator issues and renews the certificate; false when
	// cert-manager does.
	Rotate bool
}

// DefaultValidity is the serving certificate's lifetime.
const DefaultValidity = 365 * 24 * time.Hour

// Serving is the current serving certificate.
type Serving struct {
	cert atomic.Pointer[tls.Certificate]
}

// GetCertificate is for tls.Config: it fails until a certificate arrived.
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := s.cert.Load()
	if c == nil {
		return nil, errors.New("no webhook serving certificate yet")
	}
	return c, nil
}

// Ready is a readiness check: a replica without a certificate serves no
// admission request.
func (s *Serving) Ready(*http.Request) error {
	if s.cert.Load() == nil {
		return errors.New("no webhook serving certificate yet")
	}
	return nil
}

// Add registers the rotator (on the leader, unless cert-manager issues;
// it makes sure the Secret exists) and the Secret's reader (on every
// replica, filling s) with mgr.
func Add(ctx context.Context, mgr ctrl.Manager, s *Serving, opts Options) error {
	if err := os.MkdirAll(opts.CertDir, 0o700); err != nil {
		return fmt.Errorf("webhook certificate folder: %w", err)
	}
	// cert-manager creates its Secret itself (of type kubernetes.io/tls;
	// a Secret's type cannot change, so none is made for it here).
	if opts.Rotate {
		if err := ensureSecret(ctx, mgr.GetAPIReader(), mgr.GetClient(), opts.Secret); err != nil {
			return err
		}
		if err := addRotator(mgr, opts); err != nil {
			return err
		}
	}
	r := &reader{client: mgr.GetClient(), key: opts.Secret, dir: opts.CertDir, serving: s}
	isSecret := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == opts.Secret.Namespace && o.GetName() == opts.Secret.Name
	})
	return ctrl.NewControllerManagedBy(mgr).Named("webhook-cert").
		For(&corev1.Secret{}, builder.WithPredicates(isSecret)).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
}

func addRotator(mgr ctrl.Manager, opts Options) error {
	validity := cmp.Or(opts.Validity, DefaultValidity)
	var hooks []rotator.WebhookInfo
	for _, n := range opts.Validating {
		hooks = append(hooks, rotator.WebhookInfo{Name: n, Type: rotator.Validating})
	}
	for _, n := range opts.Mutating {
		hooks = append(hooks, rotator.WebhookInfo{Name: n, Type: rotator.Mutating})
	}
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:              opts.Secret,
		CertDir:                opts.CertDir,
		CAName:                 "cloister-webhook-ca",
		CAOrganization:         "cloister",
		DNSName:                opts.DNSName,
		IsReady:                make(chan struct{}),
		Webhooks:               hooks,
		FieldOwner:             "cloister-operator",
		RequireLeaderElection:  true,
		ServerCertDuration:     validity,
		CaCertDuration:         opts.CAValidity,
		LookaheadInterval:      validity / 3,
		RotationCheckFrequency: min(max(validity/10, time.Second), 12*time.Hour),
		// Unique per process: one rotator per Secret.
		ControllerName: "webhook-cert-rotator-" + opts.Secret.Name,
	})
	if err != nil {
		return fmt.Errorf("adding the webhook certificate rotator: %w", err)
	}
	return nil
}

// ensureSecret creates the empty Secret cert-controller fills, unless the
// chart did.
func ensureSecret(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName) error {
	err := r.Get(ctx, key, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	err = w.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the webhook certificate Secret %s: %w", key, err)
	}
	return nil
}

// reader serves and writes out what the Secret holds.
type reader struct {
	client  client.Client
	key     types.NamespacedName
	dir     string
	serving *Serving
}

func (r *reader) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var s corev1.Secret
	if err := r.client.Get(ctx, r.key, &s); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	crt, key := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return reconcile.Result{}, nil // not issued yet
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("the webhook certificate in %s: %w", r.key, err)
	}
	// The files first: once the certificate is served (ready), they are
	// there too.
	for name, data := range map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key} {
		if err := writeAtomic(filepath.Join(r.dir, name), data); err != nil {
			return reconcile.Result{}, err
		}
	}
	r.serving.cert.Store(&pair)
	return reconcile.Result{}, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
