// Package operator assembles cloister-operator: the controller-runtime
// manager (leader election, probes, metrics), its cache, the release manager
// and the controllers of every kind.
package operator

import (
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/controller/cexplugin"
	"github.com/cloister-cc/cloister/internal/controller/las"
	"github.com/cloister-cc/cloister/internal/controller/service"
	"github.com/cloister-cc/cloister/internal/controller/sgxplugin"
	"github.com/cloister-cc/cloister/internal/metrics"
	"github.com/cloister-cc/cloister/internal/release"
)

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
	// InterruptedReleaseAfter is how long a release may stay pending before
	// it is recovered as the leftover of a killed operator; 0 means
	// release.DefaultStaleAfter.
	InterruptedReleaseAfter time.Duration
}

// Images are the default images of the services.
type Images struct {
	DevicePlugin string
	LAS          string
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
func New(cfg *rest.Config, opts Options, log *slog.Logger) (ctrl.Manager, error) {
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
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        opts.HealthProbeBindAddress,
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              "cloister-operator.cloister.dev",
		LeaderElectionNamespace:       opts.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				// Only what the operator owns, not every DaemonSet of the cluster.
				&appsv1.DaemonSet{}:          owned,
				&corev1.ServiceAccount{}:     owned,
				&corev1.ConfigMap{}:          owned,
				&rbacv1.ClusterRole{}:        owned,
				&rbacv1.ClusterRoleBinding{}: owned,
				&corev1.Pod{}:                {Transform: slimPod},
				&corev1.Node{}:               {Transform: slimNode},
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

	releases, err := release.NewManager(mgr.GetConfig(), log)
	if err != nil {
		return nil, err
	}
	if opts.InterruptedReleaseAfter > 0 {
		releases.SetStaleAfter(opts.InterruptedReleaseAfter)
	}
	recorder := metrics.NewRecorder(crmetrics.Registry)
	reconciler := func(kind service.Kind) *service.Reconciler {
		return &service.Reconciler{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: scheme,
			Releases: releases, Recorder: mgr.GetEventRecorder("cloister-operator"), Metrics: recorder,
			Kind: kind, OperatorNamespace: opts.Namespace, Host: opts.Host,
		}
	}

	// One controller per service kind: its chart, default image, adapter.
	for _, c := range []struct {
		chart, image string
		kind         func(service.Base) service.Kind
		setup        func(ctrl.Manager, *service.Reconciler) error
	}{
		{"sgxplugin", opts.Images.DevicePlugin, func(b service.Base) service.Kind { return &sgxplugin.Kind{Base: b} }, sgxplugin.Setup},
		{"cexplugin", opts.Images.DevicePlugin, func(b service.Base) service.Kind { return &cexplugin.Kind{Base: b} }, cexplugin.Setup},
		{"las", opts.Images.LAS, func(b service.Base) service.Kind { return &las.Kind{Base: b} }, las.Setup},
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
	return mgr, nil
}
