// Package testenv starts a real kube-apiserver and etcd for tests, from the
// pinned toolchain (controller-runtime's envtest on the cached binaries), so
// controller tests talk to the same API server release Cloister ships for.
package testenv

import (
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cloister-cc/cloister/internal/toolchain"
)

// Options adjust the control plane.
type Options struct {
	// CRDDirectoryPaths are installed before Start returns.
	CRDDirectoryPaths []string
}

// AssetsDir is the folder holding kube-apiserver and etcd: KUBEBUILDER_ASSETS
// when set, else the toolchain cache. It fails tb when they are missing.
func AssetsDir(tb testing.TB) string {
	tb.Helper()
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	tc, err := toolchain.Locate()
	if err != nil {
		tb.Fatalf("locating the Kubernetes toolchain: %v", err)
	}
	if err := tc.Check(); err != nil {
		tb.Fatalf("this test needs a real kube-apiserver and etcd: %v", err)
	}
	return tc.BinDir
}

// Start runs a control plane for the rest of tb and returns an admin
// client configuration for it.
func Start(tb testing.TB, opts Options) *rest.Config {
	tb.Helper()
	env := &envtest.Environment{
		BinaryAssetsDirectory:    AssetsDir(tb),
		CRDDirectoryPaths:        opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing:    len(opts.CRDDirectoryPaths) > 0,
		ControlPlaneStartTimeout: time.Minute, // -race on 2 cores is slow
		ControlPlaneStopTimeout:  time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		tb.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Errorf("stopping kube-apiserver and etcd: %v", err)
		}
	})
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}
