//go:build e2e

// Package e2e holds end-to-end tests against a local dev cluster: a real
// control plane from the pinned toolchain with simulated TEE nodes. Run them
// with `make e2e` (or `go test -tags e2e ./test/e2e/`); `make test` runs them
// too.
package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/devcmd"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

var shared struct {
	once    sync.Once
	cluster *cluster.Cluster
	client  kubernetes.Interface
	status  *cluster.Status
	err     error
}

func TestMain(m *testing.M) {
	// The tests' own controller-runtime clients log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	// `cloister dev` run in this process: its clusters' egress proxy runs
	// from the cloister binary, not from this test binary.
	devcmd.Executable = func() (string, error) { return build("cloister") }
	routing, routingErr := hostRouting()
	var auditErr error
	netAudit, auditErr = startAudit()
	code := m.Run()
	if sharedOp.op != nil {
		if err := sharedOp.op.signal(syscall.SIGTERM); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	if shared.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := shared.cluster.Down(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "tearing down the e2e cluster: %v\n", err)
			code = 1
		}
		cancel()
		_ = os.RemoveAll(shared.cluster.Workdir)
	}
	if netAudit != nil {
		if err := netAudit.finish(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			code = 1
		}
	} else {
		fmt.Printf("note: %v; it did not run\n", auditErr)
	}
	// Every dev cluster of the suite is down: the host's routing is as it was.
	if after, err := hostRouting(); routingErr == nil && err == nil && after != routing {
		fmt.Fprintf(os.Stderr, "FAIL: the host's routes and rules after the suite:\n%s\nbefore it:\n%s\n", after, routing)
		code = 1
	}
	os.Exit(code)
}

// tools returns the pinned toolchain or fails tb with how to build it.
func tools(tb testing.TB) *toolchain.Toolchain {
	tb.Helper()
	tc, err := toolchain.Locate()
	if err != nil {
		tb.Fatal(err)
	}
	if err := tc.Check(); err != nil {
		tb.Fatal(err)
	}
	return tc
}

// newCluster describes a cluster in a fresh work folder; the caller brings
// it up and down.
func newCluster(tb testing.TB, name string) *cluster.Cluster {
	tb.Helper()
	workdir, err := os.MkdirTemp("", "cloister-e2e-")
	if err != nil {
		tb.Fatal(err)
	}
	var log io.Writer
	if testing.Verbose() {
		log = os.Stderr
	}
	return &cluster.Cluster{Name: name, Workdir: workdir, Tools: tools(tb), Self: binary(tb, "cloister"), Log: log}
}

// sharedCluster is one dev cluster of DefaultNodes nodes that the tests of
// this package share; TestMain removes it.
func sharedCluster(t *testing.T) (*cluster.Cluster, kubernetes.Interface) {
	t.Helper()
	shared.once.Do(func() {
		c := newCluster(t, "e2e")
		shared.cluster = c
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if shared.status, shared.err = c.Up(ctx, cluster.DefaultNodes); shared.err != nil {
			return
		}
		cfg, err := c.RESTConfig()
		if err != nil {
			shared.err = err
			return
		}
		shared.client, shared.err = kubernetes.NewForConfig(cfg)
	})
	if shared.err != nil {
		t.Fatalf("bringing up the shared e2e cluster: %v", shared.err)
	}
	return shared.cluster, shared.client
}
