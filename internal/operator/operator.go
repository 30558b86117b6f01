// Package operator assembles cloister-operator: the controller-runtime
// manager (leader election, probes, metrics), its cache, the release manager
// and the controllers of every kind.
//
// Its folder is the operator subsystem: controller (one package per kind
// and the reconciler they share), health (the status engine), release
// (Helm), metrics, admission and webhookcert (the webhooks), and install
// (cloister install, which puts the operator into a cluster).
package operator

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/operator/admission"
	"github.com/cloister-cc/cloister/internal/operator/autoupdate"
	cascontroller "github.com/cloister-cc/cloister/internal/operator/controller/cas"
	"github.com/cloister-cc/cloister/internal/operator/controller/cexplugin"
	"github.com/cloister-cc/cloister/internal/operator/controller/confidentialruntime"
	lascontroller "github.com/cloister-cc/cloister/internal/operator/controller/las"
	"github.com/cloister-cc/cloister/internal/operator/controller/nitroenclave"
	"github.com/cloister-cc/cloister/internal/operator/controller/nitroplugin"
	policycontroller "github.com/cloister-cc/cloister/internal/operator/controller/policy"
	"github.com/cloister-cc/cloister/internal/operator/controller/pullsecrets"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/controller/sgxplugin"
	vaultcontroller "github.com/cloister-cc/cloister/internal/operator/controller/vault"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/operator/release"
	"github.com/cloister-cc/cloister/internal/operator/webhookcert"
)

// Secure metrics ask the API server who a scraper is and whether it may
// get /metrics (the chart's cloister-operator-metrics-reader role).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// The chart's admission policies bound every identity that holds this
// marker, whatever its name: a second service account bound to the
// operator's roles is bounded as the operator is. No API serves the
// resource; only the policies' authorizer checks ask for it.
// +kubebuilder:rbac:groups=admission.cloister.dev,resources=operatorwrites,verbs=bounded
// +kubebuilder:rbac:groups=admission.cloister.dev,resources=operatorwrites,verbs=bounded,namespace=cloister-system

// Options configure the operator; cmd/cloister-operator maps flags onto them.
type Options struct {
	MetricsBindAddress     string
	SecureMetrics          bool
	HealthProbeBindAddress string
	LeaderElect            bool
	// Namespace is the operator's namespace: leader election lease, and the
	// default namespace of cluster-scoped services' objects.
	Namespace string
	Images    Images
	// Host says where nodes keep devices and the kubelet's files.
	Host service.HostPaths
	// ImageSignatureKey verifies every image spec.autoUpdate chooses; nil:
	// autoUpdate takes none.
	ImageSignatureKey *ecdsa.PublicKey
	// Webhook configures the admission webhooks; Port 0 serves none.
	Webhook WebhookOptions
	// SkipNameValidation and Registry let a process run several
	// operators (tests): controller names are otherwise unique per
	// process, and the kinds' gauges go to controller-runtime's registry
	// unless Registry is set.
	SkipNameValidation bool
	Registry           prometheus.Registerer
	// InterruptedReleaseAfter is how long a release may stay pending before
	// it is recovered as the leftover of a killed operator; 0 means
	// release.DefaultStaleAfter.
	InterruptedReleaseAfter time.Duration
}

// WebhookOptions say where the webhooks listen and how their certificate
// is kept.
type WebhookOptions struct {
	Port int
	// Host to listen on; empty means every address.
	Host string
	// CertSecret is the Secret in the operator's namespace holding the
	// serving certificate.
	CertSecret string
	// DNSName is what the API server calls the webhooks by.
	DNSName string
	// CertValidity of the serving certificate (0: a year).
	CertValidity time.Duration
	// CertManager: cert-manager fills the Secret and the caBundle; the
	// operator only serves what it finds.
	CertManager bool
	// CertDir receives the certificate files.
	CertDir string
}

// Webhook configuration names; the operator's RBAC may update only these.
const WebhookConfiguration = "cloister-operator"

// Images are the default images of the services.
type Images struct {
	DevicePlugin string
	LAS          string
	CAS          string
	// NodeInstaller is the ConfidentialRuntime's node installer.
	NodeInstaller string
	// Enclave is the NitroEnclaveDeployment's enclave pods'.
	Enclave string
	// Initializer attests the confidential pods the operator makes (a
	// Vault's) to CAS.
	Initializer string
}

// Scheme knows every kind the operator reads or writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, basev1beta1.AddToScheme, servicesv1beta1.AddToScheme,
		casv1beta1.AddToScheme, enclavev1beta1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// New builds the manager with every controller registered.
func New(ctx context.Context, cfg *rest.Config, opts Options, log *slog.Logger) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	countWrites(cfg, crmetrics.Registry)

	ownedByOperator, err := labels.NewRequirement(service.LabelOwnerKind, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	owned := cache.ByObject{Label: labels.NewSelector().Add(*ownedByOperator)}
	metricsOpts := metricsserver.Options{BindAddress: opts.MetricsBindAddress, SecureServing: opts.SecureMetrics}
	if opts.SecureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	serving := &webhookcert.Serving{}
	webhookServer := webhook.NewServer(webhook.Options{
		Host: opts.Webhook.Host, Port: opts.Webhook.Port,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = serving.GetCertificate }},
	})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              "cloister-operator.cloister.dev",
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		WebhookServer:                 webhookServer,
		Controller:                    config.Controller{SkipNameValidation: &opts.SkipNameValidation},
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				// Only what the operator owns, not every DaemonSet of the cluster.
				&appsv1.DaemonSet{}:             owned,
				&appsv1.Deployment{}:            owned,
				&corev1.ServiceAccount{}:        owned,
				&corev1.ConfigMap{}:             owned,
				&rbacv1.ClusterRole{}:           owned,
				&rbacv1.ClusterRoleBinding{}:    owned,
				&corev1.Pod{}:                   {Transform: slimPod},
				&corev1.Node{}:                  {Transform: slimNode},
				&nodev1.RuntimeClass{}:          owned,
				&networkingv1.NetworkPolicy{}:   owned,
				&policyv1.PodDisruptionBudget{}: owned,
				&batchv1.CronJob{}:              owned,
				// Only the operator's own (its webhook certificate).
				&corev1.Secret{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	if opts.Webhook.Port > 0 {
		if err := addWebhooks(ctx, mgr, opts, serving); err != nil {
			return nil, err
		}
	}
	if err := pullsecrets.Setup(mgr, &pullsecrets.Reconciler{Client: mgr.GetClient(), Namespace: opts.Namespace}); err != nil {
		return nil, fmt.Errorf("setting up the pull-secret controller: %w", err)
	}

	releases, err := release.NewManager(mgr.GetConfig(), log)
	if err != nil {
		return nil, err
	}
	releases.SetRecordNamespace(opts.Namespace)
	if opts.InterruptedReleaseAfter > 0 {
		releases.SetStaleAfter(opts.InterruptedReleaseAfter)
	}
	recorder := metrics.NewRecorder(cmp.Or[prometheus.Registerer](opts.Registry, crmetrics.Registry))
	reconciler := func(kind service.Kind) *service.Reconciler {
		return &service.Reconciler{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: scheme,
			Releases: releases, Recorder: mgr.GetEventRecorder("cloister-operator"), Metrics: recorder,
			Kind: kind, OperatorNamespace: opts.Namespace, Host: opts.Host, Images: &autoupdate.Resolver{},
			ImageKey: opts.ImageSignatureKey,
		}
	}

	// One controller per service kind: its chart, default image, adapter.
	for _, c := range []struct {
		chart, image string
		kind         func(service.Base) service.Kind
		setup        func(ctrl.Manager, *service.Reconciler) error
	}{
		{"sgxplugin", opts.Images.DevicePlugin, func(b service.Base) service.Kind { return sgxplugin.New(b) }, sgxplugin.Setup},
		{"cexplugin", opts.Images.DevicePlugin, func(b service.Base) service.Kind { return cexplugin.New(b) }, cexplugin.Setup},
		{"nitroplugin", opts.Images.DevicePlugin, func(b service.Base) service.Kind { return nitroplugin.New(b) }, nitroplugin.Setup},
		{"las", opts.Images.LAS, func(b service.Base) service.Kind {
			return &lascontroller.Kind{Base: b, Keys: &lascontroller.NodeKeys{Reader: mgr.GetClient()}}
		}, lascontroller.Setup},
		{"cas", opts.Images.CAS, func(b service.Base) service.Kind { return &cascontroller.Kind{Base: b, Writer: mgr.GetClient()} }, cascontroller.Setup},
		{"confidentialruntime", opts.Images.NodeInstaller, func(b service.Base) service.Kind {
			return &confidentialruntime.Kind{Base: b, Version: version.Get().Version}
		}, confidentialruntime.Setup},
		{"nitroenclavedeployment", opts.Images.Enclave, func(b service.Base) service.Kind {
			return &nitroenclave.Kind{Base: b, Events: mgr.GetAPIReader()}
		}, nitroenclave.Setup},
		// A Vault names its image (pinned: the pods' policy pins it).
		{"vault", "", func(b service.Base) service.Kind {
			return &vaultcontroller.Kind{Base: b, Writer: mgr.GetClient(), Renew: true, InitializerImage: opts.Images.Initializer}
		}, vaultcontroller.Setup},
	} {
		data, err := charts.Load(c.chart)
		if err != nil {
			return nil, err
		}
		kind := c.kind(service.Base{Reader: mgr.GetClient(), ChartData: data, DefaultImage: c.image})
		if err := c.setup(mgr, reconciler(kind)); err != nil {
			return nil, fmt.Errorf("setting up the %s controller: %w", kind.Name(), err)
		}
	}
	if err := policycontroller.Setup(mgr, &conn.Connector{Reader: mgr.GetClient()}); err != nil {
		return nil, fmt.Errorf("setting up the policy controllers: %w", err)
	}
	return mgr, nil
}

// addWebhooks serves the admission webhooks once a certificate is there:
// a replica is not ready before.
func addWebhooks(ctx context.Context, mgr ctrl.Manager, opts Options, serving *webhookcert.Serving) error {
	w := opts.Webhook
	err := webhookcert.Add(ctx, mgr, serving, webhookcert.Options{
		Secret:     types.NamespacedName{Namespace: opts.Namespace, Name: w.CertSecret},
		DNSName:    w.DNSName,
		Validating: []string{WebhookConfiguration},
		Mutating:   []string{WebhookConfiguration},
		CertDir:    w.CertDir,
		Validity:   w.CertValidity,
		Rotate:     !w.CertManager,
	})
	if err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook-certificate", serving.Ready); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook-server", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	return admission.Setup(mgr, opts.Namespace)
}
