package release

import (
	"fmt"
	"log/slog"
	"strings"

	"helm.sh/helm/v4/pkg/release"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/client-go/kubernetes"
)

// LabelReleaseNamespace on a release record in the operator's namespace
// names the namespace of the release's objects.
const LabelReleaseNamespace = "cloister.dev/release-namespace"

// storagePrefix is the start of every key Helm's storage makes
// (storage.HelmStorageType and a dot).
const storagePrefix = "sh.helm.release.v1."

// homeStore keeps the records of the releases of namespace ns in another
// namespace's driver: the operator's own, which a tenant who can write in
// ns cannot write. A record forged in ns is never read, so it cannot name
// objects for Helm to delete. Keys gain the namespace (a DNS label, without
// dots, so no two releases' keys meet), and a record is read only when it
// carries LabelReleaseNamespace=ns and describes a release of ns: records
// an older operator kept beside the objects are not read, and the release
// is installed again over its objects, which carry the same release name
// and namespace.
type homeStore struct {
	driver.Driver
	ns string
}

// Records is the store of the release records of namespace ns, kept as
// ConfigMaps in namespace records.
func Records(core kubernetes.Interface, records, ns string, log *slog.Logger) *storage.Storage {
	d := driver.NewConfigMaps(core.CoreV1().ConfigMaps(records))
	if log != nil {
		d.SetLogger(log.Handler())
	}
	return storage.Init(&homeStore{Driver: d, ns: ns})
}

func (s *homeStore) key(k string) (string, error) {
	rest, ok := strings.CutPrefix(k, storagePrefix)
	if !ok {
		return "", fmt.Errorf("release record key %q does not start with %q", k, storagePrefix)
	}
	return storagePrefix + s.ns + "." + rest, nil
}

func (s *homeStore) mine(r release.Releaser) bool {
	rel, ok := r.(*helmrelease.Release)
	return ok && rel.Namespace == s.ns && rel.Labels[LabelReleaseNamespace] == s.ns
}

func (s *homeStore) label(r release.Releaser) (release.Releaser, error) {
	rel, ok := r.(*helmrelease.Release)
	if !ok {
		return nil, fmt.Errorf("release record of type %T", r)
	}
	if rel.Namespace != s.ns {
		return nil, fmt.Errorf("release %s of namespace %s stored as one of %s", rel.Name, rel.Namespace, s.ns)
	}
	if rel.Labels == nil {
		rel.Labels = map[string]string{}
	}
	rel.Labels[LabelReleaseNamespace] = s.ns
	return rel, nil
}

func (s *homeStore) Create(key string, r release.Releaser) error {
	return s.put(key, r, s.Driver.Create)
}

func (s *homeStore) Update(key string, r release.Releaser) error {
	return s.put(key, r, s.Driver.Update)
}

// put writes r under its namespaced key, labelled with its namespace.
func (s *homeStore) put(key string, r release.Releaser, write func(string, release.Releaser) error) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	if r, err = s.label(r); err != nil {
		return err
	}
	return write(k, r)
}

func (s *homeStore) Delete(key string) (release.Releaser, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	return s.Driver.Delete(k)
}

func (s *homeStore) Get(key string) (release.Releaser, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	r, err := s.Driver.Get(k)
	if err != nil {
		return nil, err
	}
	if !s.mine(r) {
		return nil, driver.ErrReleaseNotFound
	}
	return r, nil
}

func (s *homeStore) List(filter func(release.Releaser) bool) ([]release.Releaser, error) {
	return s.Driver.List(func(r release.Releaser) bool { return s.mine(r) && filter(r) })
}

func (s *homeStore) Query(labels map[string]string) ([]release.Releaser, error) {
	q := map[string]string{LabelReleaseNamespace: s.ns}
	for k, v := range labels {
		q[k] = v
	}
	all, err := s.Driver.Query(q)
	if err != nil {
		return nil, err
	}
	var out []release.Releaser
	for _, r := range all {
		if s.mine(r) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, driver.ErrReleaseNotFound
	}
	return out, nil
}
