// Package service is the reconciler every Helm-managed kind shares
// (SGXPlugin, CEXPlugin, NitroPlugin, LAS, ConfidentialRuntime, CAS,
// NitroEnclaveDeployment and Vault): fetch the CR, observe its release and owned
// objects, let the status engine (internal/operator/health) pick the state
// and the one next action, write the status only when it changed, then act.
// A Kind supplies what differs: chart, values, status fields and its own
// metrics; and, where it needs them, the optional hooks of hooks.go:
// PinnedRelease (the deployed revision's chart and values until the spec
// changes), PostRenderer (change the rendered objects), Poller (look again
// after a while, for health from outside the cluster's objects), Announcer
// (the kind's own events once its status was written), Drainer (undo node
// work before the release is uninstalled), ReleaseStatusFiller (status
// fields from how the release fared), NoAutoUpdate (spec.autoUpdate
// never moves it), Conditioner (condition rows of its own) and
// ReadinessJudge (pods not ready are judged by the kind's own rows). It
// also writes what a kind keeps beside its release (beside.go).
package service

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/operator/release"
)

// Finalizer keeps a CR until its release is uninstalled.
const Finalizer = "cloister.dev/release"

// Labels the operator puts on every owned object (and its pods).
const (
	LabelOwnerKind      = "cloister.dev/owner-kind"
	LabelOwnerName      = "cloister.dev/owner-name"
	LabelOwnerNamespace = "cloister.dev/owner-namespace"
)

// Object is a service CR.
type Object interface {
	client.Object
	GetServiceSpec() *common.ServiceSpec
	GetServiceStatus() *common.ServiceStatus
}

// Kind adapts one service CRD to the reconciler.
type Kind interface {
	// Name is the API kind, e.g. "SGXPlugin".
	Name() string
	// ReleasePrefix names the kind's releases: <prefix>-<CR name>.
	ReleasePrefix() string
	// New returns an empty CR of the kind.
	New() Object
	Chart() *chart.Chart
	// Release returns the namespace of the CR's release and objects, and
	// the chart values for the CR.
	Release(obj Object, operatorNamespace string) (namespace string, values map[string]any, err error)
	// FillStatus fills the kind's own status fields (metrics, alerts)
	// from the cluster and judges from them whether the CR is healthy (the
	// IsHealthy condition).
	FillStatus(ctx context.Context, obj Object, oos []Owned) health.Observation
	// Metrics are the kind's status fields as Prometheus samples.
	Metrics(obj Object) []metrics.Sample
}

// Reconciler reconciles the CRs of one Kind.
type Reconciler struct {
	// Client reads the CR and other cached objects and writes.
	Client client.Client
	// Reader reads owned objects past the cache.
	Reader            client.Reader
	Scheme            *runtime.Scheme
	Releases          *release.Manager
	Recorder          events.EventRecorder
	Metrics           *metrics.Recorder
	Kind              Kind
	OperatorNamespace string
	// Host says where nodes keep what the charts mount; every release
	// gets it as the value "host".
	Host HostPaths
	// DeletionTimeout bounds how long deletion waits for an uninstall that
	// keeps failing before the finalizer goes anyway; 0 means
	// DefaultDeletionTimeout.
	DeletionTimeout time.Duration
	// Clock tells the time; nil means the real clock.
	Clock clock.PassiveClock
	// Images resolves spec.autoUpdate's newest image; nil: autoUpdate is
	// off.
	Images ImageResolver
	// ImageKey verifies the images autoUpdate chooses (the key the
	// operator was installed with); nil: autoUpdate takes none.
	ImageKey *ecdsa.PublicKey
	// AutoUpdateInterval is how often autoUpdate reads the registry; 0
	// means DefaultAutoUpdateInterval.
	AutoUpdateInterval time.Duration
}

// errGone: the CR was deleted while being reconciled.
var errGone = errors.New("the object is gone")

const (
	// waitDelay paces action 7 (a release in transition, something not yet
	// observable): watches bring most changes sooner.
	waitDelay = 2 * time.Second
	// actedRecheck is how soon the effect of an action is observed.
	actedRecheck = 200 * time.Millisecond
)

// Reconcile observes one CR, writes its status and takes the next action.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.Kind.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(r.Kind.Name(), req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	before := obj.DeepCopyObject().(Object)

	rreq, err := r.releaseRequest(obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	recheck := r.autoUpdate(ctx, obj, &rreq)
	obs, oos, err := r.observe(ctx, obj, rreq)
	if err != nil {
		return ctrl.Result{}, err
	}
	res := health.Evaluate(obs)
	r.setStatus(obj, res)
	switch err := r.writeStatus(ctx, before, obj); {
	case errors.Is(err, errGone):
		return ctrl.Result{}, nil
	case apierrors.IsConflict(err):
		// Read from a cache that has not seen our last write: judge again
		// from the newer object rather than announce this state twice.
		return ctrl.Result{RequeueAfter: actedRecheck}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	r.announceState(ctx, obj, before.GetServiceStatus().State)
	if a, ok := r.Kind.(Announcer); ok {
		a.Announce(r.Recorder, before, obj)
	}
	if obj.GetDeletionTimestamp() == nil {
		r.Metrics.Record(r.Kind.Name(), obj.GetNamespace(), obj.GetName(), obj.GetServiceStatus().State, r.Kind.Metrics(obj))
	}
	result, err := r.act(ctx, obj, rreq, res, oos)
	if p, ok := r.Kind.(Poller); ok && err == nil && result.IsZero() && obj.GetDeletionTimestamp() == nil {
		result.RequeueAfter = p.PollAfter(obj)
	}
	if recheck > 0 && err == nil && (result.RequeueAfter == 0 || recheck < result.RequeueAfter) {
		result.RequeueAfter = recheck
	}
	return result, err
}

// releaseRequest is the release the CR should have.
func (r *Reconciler) releaseRequest(obj Object) (release.Request, error) {
	ns, values, err := r.Kind.Release(obj, r.OperatorNamespace)
	if err != nil {
		return release.Request{}, fmt.Errorf("computing release of %s %s: %w", r.Kind.Name(), obj.GetName(), err)
	}
	values["host"] = r.Host.Values()
	ch := r.Kind.Chart()
	if p, ok := r.Kind.(PinnedRelease); ok {
		if ch, values, err = r.pinned(p, obj, ns, ch, values); err != nil {
			return release.Request{}, err
		}
	}
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return release.Request{}, err
	}
	yes := true
	labels := map[string]string{LabelOwnerKind: r.Kind.Name(), LabelOwnerName: obj.GetName(), common.LabelManagedBy: common.ManagedByOperator}
	if obj.GetNamespace() != "" {
		labels[LabelOwnerNamespace] = obj.GetNamespace()
	}
	var transform func(*unstructured.Unstructured) error
	if p, ok := r.Kind.(PostRenderer); ok {
		transform = func(u *unstructured.Unstructured) error { return p.PostRender(obj, values, u) }
	}
	return release.Request{
		Name:      r.Kind.ReleasePrefix() + "-" + obj.GetName(),
		Namespace: ns,
		Chart:     ch,
		Values:    values,
		Transform: transform,
		Owner: metav1.OwnerReference{
			APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: obj.GetName(), UID: obj.GetUID(),
			Controller: &yes, BlockOwnerDeletion: &yes,
		},
		Labels: labels,
	}, nil
}

// pinned is the chart and values of a PinnedRelease's request: the
// deployed revision's own while it was made for the CR's generation,
// else the kind's with what Carry keeps from it.
func (r *Reconciler) pinned(p PinnedRelease, obj Object, ns string, ch *chart.Chart, values map[string]any) (*chart.Chart, map[string]any, error) {
	values[ValueSpecGeneration] = obj.GetGeneration()
	deployed, err := r.Releases.LastDeployed(ns, r.Kind.ReleasePrefix()+"-"+obj.GetName())
	if err != nil {
		return nil, nil, fmt.Errorf("reading the deployed release of %s %s: %w", r.Kind.Name(), obj.GetName(), err)
	}
	if deployed == nil || deployed.Chart == nil {
		return ch, values, nil
	}
	if g, ok := deployed.Config[ValueSpecGeneration]; ok && scalar(g) == scalar(obj.GetGeneration()) {
		return deployed.Chart, deployed.Config, nil
	}
	p.Carry(obj, deployed.Config, values)
	return ch, values, nil
}

// writeStatus patches the status subresource if, and only if, it changed:
// an idle cluster sees no writes.
func (r *Reconciler) writeStatus(ctx context.Context, before, obj Object) error {
	was, err := statusOf(before)
	if err != nil {
		return err
	}
	is, err := statusOf(obj)
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(was, is) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, obj, mergeFromLocked(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return errGone
		}
		return fmt.Errorf("writing status of %s %s: %w", r.Kind.Name(), obj.GetName(), err)
	}
	log.FromContext(ctx).V(1).Info("status written", "state", obj.GetServiceStatus().State)
	return nil
}

// statusOf extracts the whole status (service fields and the kind's own)
// through the unstructured converter, so no kind needs its own comparer.
func statusOf(obj Object) (any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("reading the status of %s: %w", obj.GetName(), err)
	}
	return u["status"], nil
}

// The shared reconciler's own needs: Helm releases stored as ConfigMaps,
// the objects the charts contain, events.
// +kubebuilder:rbac:groups=core,resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=core,resources=serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;clusterrolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// The device plugin charts' DRA drivers: their roles (granted only what
// the operator holds; its admission policy keeps it off ResourceSlices)
// and a CEX config set's DeviceClass.
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceslices,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=deviceclasses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=cloister-system
