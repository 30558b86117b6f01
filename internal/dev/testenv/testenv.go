// Package testenv gives tests real parts: a kube-apiserver and etcd from the
// pinned toolchain (controller-runtime's envtest on the cached binaries), so
// controller tests talk to the same API server release Cloister ships for.
package testenv

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cloister-cc/cloister/internal/dev/toolchain"
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
	dir, err := assetsDir()
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

func assetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	tc, err := toolchain.Locate()
	if err != nil {
		return "", fmt.Errorf("locating the Kubernetes toolchain: %w", err)
	}
	if err := tc.Check(); err != nil {
		return "", fmt.Errorf("this test needs a real kube-apiserver and etcd: %w", err)
	}
	return tc.BinDir, nil
}

// quietControllerRuntime gives controller-runtime a logger that drops
// everything: tests assert behaviour, and without a logger it prints a
// stack trace ("log.SetLogger(...) was never called") into the output of
// every package that runs a controller, burying real failures.
func quietControllerRuntime() { ctrllog.SetLogger(logr.Discard()) }

func environment(dir string, opts Options) *envtest.Environment {
	quietControllerRuntime()
	return &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		CRDDirectoryPaths:        opts.CRDDirectoryPaths,
		ErrorIfCRDPathMissing:    len(opts.CRDDirectoryPaths) > 0,
		ControlPlaneStartTimeout: time.Minute, // -race on 2 cores is slow
		ControlPlaneStopTimeout:  time.Minute,
	}
}

// Start runs a control plane for the rest of tb and returns an admin
// client configuration for it.
func Start(tb testing.TB, opts Options) *rest.Config {
	tb.Helper()
	env := environment(AssetsDir(tb), opts)
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

// Main runs a test package against one control plane that all its tests
// share: call it from TestMain. cfg is set before any test runs.
//
// A fuzzing run of the package's fuzz targets alone (-test.fuzz with
// -test.run '^$', as make fuzz runs them, and its workers) needs no
// control plane and starts none: cfg stays nil.
func Main(m *testing.M, opts Options, cfg **rest.Config) int {
	if fuzzingOnly() {
		return m.Run()
	}
	dir, err := assetsDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := environment(dir, opts)
	if *cfg, err = env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "starting kube-apiserver and etcd: %v\n", err)
		return 1
	}
	(*cfg).QPS, (*cfg).Burst = 1000, 2000
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping kube-apiserver and etcd: %v\n", err)
		code = 1
	}
	return code
}

// fuzzingOnly: this process runs fuzz targets and no test.
func fuzzingOnly() bool {
	flag.Parse()
	lookup := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	return lookup("test.fuzzworker") == "true" || (lookup("test.fuzz") != "" && lookup("test.run") == "^$")
}
