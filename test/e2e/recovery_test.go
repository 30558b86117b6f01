//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	rcommon "helm.sh/helm/v4/pkg/release/common"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	oprelease "github.com/cloister-cc/cloister/internal/operator/release"
)

// latestRelease reads the newest revision of a release of namespace ns
// from the operator's record store (its namespace's ConfigMaps).
func latestRelease(ctx context.Context, cs kubernetes.Interface, ns, name string) (*storage.Storage, *helmrelease.Release, error) {
	s := oprelease.Records(cs, operatorNamespace, ns, nil)
	r, err := s.Last(name)
	if err != nil {
		return s, nil, err
	}
	rel, ok := r.(*helmrelease.Release)
	if !ok {
		return s, nil, fmt.Errorf("release %s has type %T", name, r)
	}
	return s, rel, nil
}

// waitConverged waits until the LAS is HEALTHY with image rolled out and
// its release's newest revision deployed (no revision left pending).
func waitConverged(t *testing.T, cs kubernetes.Interface, crs client.Client, las *basev1beta1.LAS, image string) {
	t.Helper()
	waitState(t, crs, las, common.StateHealthy)
	ns, name := las.Spec.Namespace, "las-"+las.Name
	waitFor(t, "the release to be deployed with "+image, 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		_, rel, err := latestRelease(ctx, cs, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		ds, err := getDaemonSet(ctx, cs, ns, name)
		if err != nil {
			return false, err.Error(), nil
		}
		img := ds.Spec.Template.Spec.Containers[0].Image
		return rel.Info.Status == rcommon.StatusDeployed && img == image,
			fmt.Sprintf("revision %d %s, image %s", rel.Version, rel.Info.Status, img), nil
	})
	waitState(t, crs, las, common.StateHealthy)
}

// An operator killed at any moment of a reconciliation, and restarted,
// converges to the same state; a release the kill left pending-install or
// pending-upgrade is recovered, never stuck on "another operation is in
// progress".
func TestOperatorKilledConverges(t *testing.T) {
	_, cs, crs, op := sharedOperator(t)
	t.Cleanup(func() {
		if op.pid() == 0 {
			op.start(t)
		}
	})
	ns := namespace(t, cs)
	las := newLAS(t, crs, "killed", ns, 18802)
	waitConverged(t, cs, crs, las, las.Spec.Image)
	ctx := context.Background()

	// Kill the operator at different points of an upgrade.
	for i, delay := range []time.Duration{0, 30 * time.Millisecond, 120 * time.Millisecond, 400 * time.Millisecond} {
		image := fmt.Sprintf("ghcr.io/cloister-cc/cloister-las:e2e-kill-%d", i)
		patch := client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"spec":{"image":%q}}`, image)))
		if err := crs.Patch(ctx, &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: las.Name}}, patch); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		op.kill(t)
		op.start(t)
		waitConverged(t, cs, crs, las, image)
	}

	// A release left pending by a kill mid-operation, long ago.
	for _, st := range []rcommon.Status{rcommon.StatusPendingUpgrade, rcommon.StatusPendingInstall} {
		op.stop(t)
		s, rel, err := latestRelease(ctx, cs, ns, "las-"+las.Name)
		if err != nil {
			t.Fatal(err)
		}
		rel.Info.Status = st
		rel.Info.LastDeployed = time.Now().Add(-time.Hour)
		if err := s.Update(rel); err != nil {
			t.Fatal(err)
		}
		image := "ghcr.io/cloister-cc/cloister-las:e2e-" + string(st)
		patch := client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"spec":{"image":%q}}`, image)))
		if err := crs.Patch(ctx, &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: las.Name}}, patch); err != nil {
			t.Fatal(err)
		}
		op.start(t)
		waitConverged(t, cs, crs, las, image)
	}
	log := readFile(t, op.logPath)
	if n := strings.Count(log, "recovering release left pending"); n < 1 {
		t.Errorf("the operator log shows %d recoveries of a pending release, want at least the forced one", n)
	} else {
		t.Logf("releases recovered from pending: %d (1 forced, the rest left by kills)", n)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
