package operator

import "testing"

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/apis/apps/v1/namespaces/x/daemonsets/y":                   "daemonsets",
		"/apis/apps/v1/namespaces/x/daemonsets":                     "daemonsets",
		"/apis/base.cloister.dev/v1beta1/sgxplugins/a/status":       "sgxplugins/status",
		"/api/v1/namespaces/x/configmaps/sh.helm.release.v1.las.v1": "configmaps",
		"/api/v1/namespaces/x":                                      "namespaces",
		"/api/v1/nodes":                                             "nodes",
		"/apis/coordination.k8s.io/v1/namespaces/ops/leases/op":     "leases",
		"/version": "other",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
