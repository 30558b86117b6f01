// Package release installs the owned objects of a custom resource as a Helm
// release of an embedded chart (Helm v4 SDK), one release per CR, its
// records ConfigMaps in the operator's namespace (SetRecordNamespace), never
// in the namespace of its objects, where a tenant could forge them. It
// observes what the status engine needs (ReleaseExists/Steady/Failed/
// Deployed, the desired objects) and performs install, upgrade and
// uninstall, recovering releases a crash left pending.
package release

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Request says which release a CR has and what it should contain.
type Request struct {
	// Name of the release; also the name of its objects (charts use
	// .Release.Name).
	Name string
	// Namespace holds the release record and the namespaced objects.
	Namespace string
	Chart     *chart.Chart
	Values    map[string]any
	// Owner becomes every object's only owner reference (controller);
	// without a UID the objects get no owner (the operator's own release).
	Owner metav1.OwnerReference
	// Labels are added to every object, so the operator can watch just
	// its own objects.
	Labels map[string]string
	// TakeOwnership adopts objects that exist without belonging to a
	// release (CRDs applied with kubectl).
	TakeOwnership bool
	// Transform, when set, changes each rendered object after the chart:
	// what only code can compute from the rendered objects themselves (a
	// confidential pod's initdata, from its pod template).
	Transform func(*unstructured.Unstructured) error
}

// DefaultStaleAfter is how long a release may stay pending-install,
// pending-upgrade or pending-rollback before it is taken for the leftover of
// an interrupted operation (an operator killed mid-install) and recovered.
// The operator itself never leaves a release pending longer than one call.
const DefaultStaleAfter = 20 * time.Second

// Manager performs the Helm actions of the operator.
type Manager struct {
	config     *rest.Config
	discovery  discovery.CachedDiscoveryInterface
	mapper     meta.RESTMapper
	log        *slog.Logger
	staleAfter time.Duration
	clock      clock.PassiveClock
	driver     string
	// records is the namespace holding every release record; empty:
	// each release's own namespace (the CLI's install of the operator).
	records string
	core    kubernetes.Interface

	mu      sync.Mutex
	configs map[string]*action.Configuration // by namespace
}

// NewManager returns a Manager using cfg for everything it does.
func NewManager(cfg *rest.Config, log *slog.Logger) (*Manager, error) {
	dc, mapper, err := newSharedDiscovery(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return &Manager{
		config: cfg, discovery: dc, mapper: mapper, log: log, core: core,
		staleAfter: DefaultStaleAfter, clock: clock.RealClock{}, driver: "configmap",
		configs: map[string]*action.Configuration{},
	}, nil
}

// SetDriver chooses where release records live: "configmap" (the
// operator's, readable with its RBAC) or "secret" (the Helm CLI's default,
// so `helm list` shows a release a person installed).
func (m *Manager) SetDriver(d string) { m.driver = d }

// SetRecordNamespace keeps the records of every release as ConfigMaps in
// namespace ns (the operator's), whatever namespace the release's objects
// are in.
func (m *Manager) SetRecordNamespace(ns string) { m.records = ns }

// SetStaleAfter changes DefaultStaleAfter (tests shorten it).
func (m *Manager) SetStaleAfter(d time.Duration) { m.staleAfter = d }

// actionConfig is the Helm configuration for releases in namespace ns.
func (m *Manager) actionConfig(ns string) (*action.Configuration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cfg, ok := m.configs[ns]; ok {
		return cfg, nil
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(m.log.Handler()))
	getter := &restGetter{config: m.config, namespace: ns, discovery: m.discovery, mapper: m.mapper}
	if err := cfg.Init(getter, ns, m.driver); err != nil {
		return nil, fmt.Errorf("initialising helm for namespace %s: %w", ns, err)
	}
	if kc, ok := cfg.KubeClient.(*kube.Client); ok {
		kc.Namespace = ns
	}
	if m.records != "" {
		cfg.Releases = Records(m.core, m.records, ns, m.log)
	}
	m.configs[ns] = cfg
	return cfg, nil
}

// Latest returns the newest revision of the release in ns, or nil if it
// has none.
func (m *Manager) Latest(ns, name string) (*helmrelease.Release, error) {
	cfg, err := m.actionConfig(ns)
	if err != nil {
		return nil, err
	}
	return m.latest(cfg, name)
}

// latest returns the newest revision of the release, or nil if it has none.
func (m *Manager) latest(cfg *action.Configuration, name string) (*helmrelease.Release, error) {
	r, err := cfg.Releases.Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rel, ok := r.(*helmrelease.Release)
	if !ok {
		return nil, fmt.Errorf("release %s has unsupported type %T", name, r)
	}
	return rel, nil
}

// stale reports whether rel is pending from an operation that is not
// running any more.
func (m *Manager) stale(rel *helmrelease.Release) bool {
	if rel == nil || rel.Info == nil || !rel.Info.Status.IsPending() {
		return false
	}
	return m.clock.Now().Sub(rel.Info.LastDeployed) > m.staleAfter
}

// Install creates the release (revision 1).
func (m *Manager) Install(ctx context.Context, req Request) error {
	cfg, err := m.actionConfig(req.Namespace)
	if err != nil {
		return err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace = req.Name, req.Namespace
	in.ServerSideApply, in.ForceConflicts = true, true
	in.WaitStrategy = kube.HookOnlyStrategy
	in.Timeout = time.Minute
	in.PostRenderer = ownership{owner: req.Owner, labels: req.Labels, transform: req.Transform}
	in.TakeOwnership = req.TakeOwnership
	if _, err := in.RunWithContext(ctx, req.Chart, req.Values); err != nil {
		return fmt.Errorf("installing release %s/%s: %w", req.Namespace, req.Name, err)
	}
	return nil
}

// Upgrade applies the chart and values again: a changed spec is rolled out
// and drifted or deleted objects are restored. A release an interrupted
// operation left pending is marked failed first, as Helm refuses to touch a
// pending release ("another operation is in progress").
func (m *Manager) Upgrade(ctx context.Context, req Request) error {
	cfg, err := m.actionConfig(req.Namespace)
	if err != nil {
		return err
	}
	if err := m.recoverPending(cfg, req.Name); err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = req.Namespace
	up.ServerSideApply, up.ForceConflicts = "true", true
	up.WaitStrategy = kube.HookOnlyStrategy
	up.Timeout = time.Minute
	up.MaxHistory = 5
	up.PostRenderer = ownership{owner: req.Owner, labels: req.Labels, transform: req.Transform}
	up.TakeOwnership = req.TakeOwnership
	if _, err := up.RunWithContext(ctx, req.Name, req.Chart, req.Values); err != nil {
		return fmt.Errorf("upgrading release %s/%s: %w", req.Namespace, req.Name, err)
	}
	return nil
}

// recoverPending marks a stale pending latest revision as failed.
func (m *Manager) recoverPending(cfg *action.Configuration, name string) error {
	rel, err := m.latest(cfg, name)
	if err != nil || !m.stale(rel) {
		return err
	}
	m.log.Info("recovering release left pending by an interrupted operation",
		"release", name, "status", rel.Info.Status, "since", rel.Info.LastDeployed)
	rel.SetStatus(rcommon.StatusFailed, fmt.Sprintf("%s interrupted; recovered by cloister-operator", rel.Info.Status))
	if err := cfg.Releases.Update(rel); err != nil {
		return fmt.Errorf("marking interrupted release %s failed: %w", name, err)
	}
	return nil
}

// Uninstall deletes the release and its objects. A release that does not
// exist is not an error.
func (m *Manager) Uninstall(ctx context.Context, namespace, name string) error {
	cfg, err := m.actionConfig(namespace)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.IgnoreNotFound = true
	un.WaitStrategy = kube.HookOnlyStrategy
	un.DeletionPropagation = "background"
	un.Timeout = time.Minute
	if _, err := un.Run(name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("uninstalling release %s/%s: %w", namespace, name, err)
	}
	return nil
}

// ErrNothingToRollBackTo: no revision of the release was ever deployed.
var ErrNothingToRollBackTo = errors.New("no earlier revision was deployed")

// rollbackPrefix starts the description Helm gives a rollback's revision.
const rollbackPrefix = "Rollback to "

// Rollback returns a release whose latest revision failed to the last
// revision that was deployed, which keeps (or starts again) running, and
// returns that revision.
func (m *Manager) Rollback(ctx context.Context, namespace, name string) (int, error) {
	cfg, err := m.actionConfig(namespace)
	if err != nil {
		return 0, err
	}
	if err := m.recoverPending(cfg, name); err != nil {
		return 0, err
	}
	good, err := m.lastDeployed(cfg, name)
	if err != nil {
		return 0, err
	}
	rb := action.NewRollback(cfg)
	rb.Version = good.Version
	rb.ServerSideApply, rb.ForceConflicts = "true", true
	rb.WaitStrategy = kube.HookOnlyStrategy
	rb.Timeout = time.Minute
	rb.MaxHistory = 5
	if err := rb.Run(name); err != nil {
		return 0, fmt.Errorf("rolling release %s/%s back to revision %d: %w", namespace, name, good.Version, err)
	}
	return good.Version, nil
}

// LastDeployed is the newest revision of the release in ns that was
// deployed (now, or until a later one superseded it), or nil if none was.
func (m *Manager) LastDeployed(ns, name string) (*helmrelease.Release, error) {
	cfg, err := m.actionConfig(ns)
	if err != nil {
		return nil, err
	}
	rel, err := m.lastDeployed(cfg, name)
	if errors.Is(err, ErrNothingToRollBackTo) || errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	return rel, err
}

// lastDeployed is the newest revision of name that was deployed (now, or
// until a later one superseded it).
func (m *Manager) lastDeployed(cfg *action.Configuration, name string) (*helmrelease.Release, error) {
	all, err := m.history(cfg, name)
	if err != nil {
		return nil, err
	}
	var good *helmrelease.Release
	for _, r := range all {
		if st := r.Info.Status; (st == rcommon.StatusDeployed || st == rcommon.StatusSuperseded) && (good == nil || r.Version > good.Version) {
			good = r
		}
	}
	if good == nil {
		return nil, fmt.Errorf("release %s: %w", name, ErrNothingToRollBackTo)
	}
	return good, nil
}

// history is every stored revision of name.
func (m *Manager) history(cfg *action.Configuration, name string) ([]*helmrelease.Release, error) {
	rs, err := cfg.Releases.History(name)
	if err != nil {
		return nil, err
	}
	out := make([]*helmrelease.Release, 0, len(rs))
	for _, r := range rs {
		rel, ok := r.(*helmrelease.Release)
		if !ok {
			return nil, fmt.Errorf("release %s has unsupported type %T", name, r)
		}
		if rel.Info != nil {
			out = append(out, rel)
		}
	}
	return out, nil
}
