//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/store/kubestore"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// The three replicas of CAS ha (cas_replicas_test.go), as these steps
// find and leave them.
var (
	haPods = conn.PodNames("ha", 3)
	haAt   = []string{"--cluster", "default/ha", "--insecure-simulated-cas"}
)

// haAttest attests as the workload of policy default/shop to CAS ha with
// the developer's simulation key the CAS resource names, and returns the
// root CA and the env (with the policy's secret) it got.
func (e *realNodeEnv) haAttest(dir string) (rootCA, env string, err error) {
	devKey := filepath.Join(work.dir, "ha-sim.pem")
	if _, err := e.cli(append([]string{"cas", "attest", "--policy", "default/shop", "--service", "web", "--sim", "--sim-key", devKey, "--out", dir}, haAt...)...); err != nil {
		return "", "", err
	}
	ca, err := os.ReadFile(filepath.Join(dir, casclient.RootCAFile))
	if err != nil {
		return "", "", err
	}
	en, err := os.ReadFile(filepath.Join(dir, casclient.EnvFile))
	return string(ca), string(en), err
}

// podUIDs are the UIDs of CAS ha's pods.
func (e *realNodeEnv) podUIDs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range haPods {
		p, err := e.cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(p.UID)
	}
	return out
}

// A new operator, with another default CAS image, leaves the running CAS
// alone: its pods keep running (same UIDs), its StatefulSet is not
// changed; what drifted meanwhile (its disruption budget, deleted) is
// repaired to the deployed revision, which shows the new operator
// reconciled it.
func testCASOperatorUpgrade(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	ss, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, "cas-ha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := e.podUIDs(t)
	image := ss.Spec.Template.Spec.Containers[0].Image

	e.op.stop(t)
	args := slices.Clone(e.op.args)
	t.Cleanup(func() {
		e.op.stop(t)
		e.op.args = args
		e.op.start(t)
	})
	newImage := imageRef("cloister-cas")
	if newImage == image {
		t.Fatalf("the upgrade's image %s is the running one", newImage)
	}
	for i, a := range e.op.args {
		if strings.HasPrefix(a, "--cas-image=") {
			e.op.args[i] = "--cas-image=" + newImage
		}
	}
	if err := e.cs.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "cas-ha", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.op.start(t)
	waitFor(t, "the new operator to repair CAS's disruption budget", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := e.cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "cas-ha", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "not there", nil
		}
		return err == nil, fmt.Sprint(err), nil
	})
	time.Sleep(5 * time.Second) // time for an upgrade that should not come
	after, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, "cas-ha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != ss.Generation || after.Spec.Template.Spec.Containers[0].Image != image {
		t.Errorf("the operator upgrade changed CAS's StatefulSet: generation %d -> %d, image %s -> %s",
			ss.Generation, after.Generation, image, after.Spec.Template.Spec.Containers[0].Image)
	}
	if now := e.podUIDs(t); !maps.Equal(now, before) {
		t.Errorf("the operator upgrade restarted CAS's pods: %v -> %v", before, now)
	}
	cas := &servicesv1beta1.CAS{ObjectMeta: metav1.ObjectMeta{Name: "ha", Namespace: "default"}}
	waitState(t, e.crs, cas, common.StateHealthy)
	if cas.Status.Replicas != 3 || cas.Status.ReadyReplicas != 3 || cas.Status.RecoveringReplicas != 0 || cas.Status.CASReplicaAlert != 0 || len(cas.Status.RootCA) != 64 {
		t.Errorf("CAS status %+v", cas.Status)
	}
}

// A new image for a CAS of three replicas rolls out one replica at a time,
// each new one recovering the seed from its peers before the next goes:
// at least two replicas stay ready throughout, and attestations from
// three clients go on with none failing. A policy created meanwhile is
// registered once.
func testCASRollingUpdate(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	cas := &servicesv1beta1.CAS{}
	if err := e.crs.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ha"}, cas); err != nil {
		t.Fatal(err)
	}
	newImage := imageRef("cloister-cas")
	stop := make(chan struct{})
	var attested, failed atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := e.haAttest(filepath.Join(work.dir, fmt.Sprintf("roll-%d-%d", i, n))); err != nil {
					failed.Add(1)
					failures.Store(fmt.Sprintf("client %d, attestation %d", i, n), err.Error())
				} else {
					attested.Add(1)
				}
			}
		})
	}
	// The fewest ready replicas seen while the new image rolls out.
	var minReady atomic.Int32
	minReady.Store(3)
	watching := make(chan struct{})
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-watching:
				return
			case <-tick.C:
			}
			ss, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, "cas-ha", metav1.GetOptions{})
			if err == nil && ss.Status.ReadyReplicas < minReady.Load() {
				minReady.Store(ss.Status.ReadyReplicas)
			}
		}
	})
	time.Sleep(3 * time.Second)
	start := time.Now()
	cas.Spec.Image = newImage
	if err := e.crs.Update(ctx, cas); err != nil {
		t.Fatal(err)
	}
	// A policy registered while replicas come and go.
	// Its own name and certificate name: default/shop holds web.shop.svc.
	doc := strings.NewReplacer("name: default/shop", "name: default/roll", "web.shop.svc", "web.roll.svc").Replace(policyDoc(work.ownerPub, "24h"))
	e.applyFile(t, e.signPolicyFor(t, "ha.default.svc:8081", "roll", doc, work.owner, ""))
	waitFor(t, "every replica to run the new image, ready", 6*time.Minute, func(ctx context.Context) (bool, string, error) {
		ss, err := e.cs.AppsV1().StatefulSets("default").Get(ctx, "cas-ha", metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		st := ss.Status
		done := ss.Spec.Template.Spec.Containers[0].Image == newImage && st.ObservedGeneration == ss.Generation &&
			st.UpdatedReplicas == 3 && st.ReadyReplicas == 3 && st.CurrentRevision == st.UpdateRevision
		return done, fmt.Sprintf("template image %s, %d updated, %d ready", ss.Spec.Template.Spec.Containers[0].Image, st.UpdatedReplicas, st.ReadyReplicas), nil
	})
	took := time.Since(start)
	time.Sleep(3 * time.Second)
	close(watching)
	close(stop)
	wg.Wait()
	failures.Range(func(k, v any) bool {
		t.Errorf("%s failed during the rolling update: %s", k, v)
		return true
	})
	t.Logf("new image rolled out to 3 CAS replicas in %s, one at a time: at least %d ready throughout; %d attestations from 3 clients meanwhile, %d failed",
		took.Round(100*time.Millisecond), minReady.Load(), attested.Load(), failed.Load())
	if minReady.Load() < 2 {
		t.Errorf("only %d replicas were ready at one point of the rollout", minReady.Load())
	}
	for _, name := range haPods {
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Spec.Containers[0].Image != newImage {
			t.Errorf("replica %s after the rollout: %v %s", name, err, podSummary(p))
		}
	}
	roll := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "roll", Namespace: "default"}}
	if !t.Run("policy registered", func(t *testing.T) { waitState(t, e.crs, roll, common.StateHealthy) }) {
		t.Fatalf("the policy created during the rollout: %+v", roll.Status.Conditions)
	}
	if roll.Status.Revision != 1 || roll.Status.CASRootCA == "" {
		t.Errorf("the policy registered during the rollout: %+v", roll.Status)
	}
	if err := e.crs.Get(ctx, client.ObjectKeyFromObject(cas), cas); err != nil {
		t.Fatal(err)
	}
	if roll.Status.CASRootCA != cas.Status.RootCA {
		t.Errorf("the policy names root CA %s, CAS shows %s", roll.Status.CASRootCA, cas.Status.RootCA)
	}
	// The operator's metrics say how many replicas are ready.
	metrics := e.operatorMetrics(t)
	if !strings.Contains(metrics, `cloister_cas_ready_replicas{kind="CAS",name="ha",namespace="default",node=""} 3`) ||
		!strings.Contains(metrics, `cloister_cas_replica_alert{kind="CAS",name="ha",namespace="default",node=""} 0`) {
		t.Errorf("the operator's metrics for CAS ha:\n%s", grepLines(metrics, `name="ha"`))
	}
}

func (e *realNodeEnv) operatorMetrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + e.op.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The scheduled backup runs and the CAS status shows its last success;
// then a backup taken with the CLI outlives the CAS: the CAS resource and
// its state deleted, the backup restored into a new CAS of the same name,
// its owners recover it, and a workload gets the same root CA and the
// same secret as before. The policies that name it leave HEALTHY while it
// is gone and are HEALTHY again after, with the same root CA.
func testCASBackupRestore(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	rootCA, env, err := e.haAttest(filepath.Join(work.dir, "backup-before"))
	if err != nil {
		t.Fatal(err)
	}

	// The scheduled backup, into a claim the owners made.
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "ha-backups", Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}}}}
	if _, err := e.cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cas := &servicesv1beta1.CAS{}
	if err := e.crs.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ha"}, cas); err != nil {
		t.Fatal(err)
	}
	uids := e.podUIDs(t)
	cas.Spec.Backup = &servicesv1beta1.CASBackup{Schedule: "* * * * *", ClaimName: claim.Name, Keep: 2}
	if err := e.crs.Update(ctx, cas); err != nil {
		t.Fatal(err)
	}
	scheduled := time.Now()
	waitFor(t, "the scheduled backup to succeed and the CAS status to show it", 4*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(cas), cas); err != nil {
			return false, err.Error(), nil
		}
		return cas.Status.LastBackup != nil, fmt.Sprintf("lastBackup %v", cas.Status.LastBackup), nil
	})
	t.Logf("scheduled backup succeeded at %s, %s after spec.backup was set", cas.Status.LastBackup.UTC().Format(time.RFC3339), time.Since(scheduled).Round(time.Second))
	if now := e.podUIDs(t); !maps.Equal(now, uids) {
		t.Errorf("adding a backup restarted CAS's pods")
	}
	jobs, err := e.cs.BatchV1().Jobs("default").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-cas-backup"})
	if err != nil || len(jobs.Items) == 0 {
		t.Fatalf("the backup's jobs: %v", err)
	}
	if logs, err := kubectl(t, e.c, "logs", "-n", "default", "job/"+jobs.Items[0].Name); err != nil || !strings.Contains(logs, "backed up CAS's state") {
		t.Errorf("the backup job's log: %v\n%s", err, logs)
	}

	// A backup with the CLI; then CAS and its state are gone.
	simKeys := cas.Spec.SimulationKeys
	file := filepath.Join(work.dir, "ha-backup.json")
	out := e.mustCLI(t, "cas", "backup", "--cluster", "default/ha", "--out", file)
	if !strings.Contains(out, "backed up CAS default/ha") {
		t.Errorf("cloister cas backup: %s", out)
	}
	if raw, err := os.ReadFile(file); err != nil || strings.Contains(string(raw), strings.TrimPrefix(strings.TrimSpace(env), "TOKEN=")) {
		t.Errorf("the backup holds the policy's secret in the clear (or is unreadable: %v)", err)
	}
	if err := e.crs.Delete(ctx, cas); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "CAS ha to be gone", 3*time.Minute, func(ctx context.Context) (bool, string, error) {
		err := e.crs.Get(ctx, client.ObjectKeyFromObject(cas), &servicesv1beta1.CAS{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})
	if err := e.crs.DeleteAllOf(ctx, &servicesv1beta1.CASStateRecord{}, client.InNamespace("default"), client.MatchingLabels{kubestore.LabelCAS: "ha"}); err != nil {
		t.Fatal(err)
	}
	roll := &casv1beta1.SignedPolicy{ObjectMeta: metav1.ObjectMeta{Name: "roll", Namespace: "default"}}
	waitFor(t, "the policy of the deleted CAS to leave HEALTHY", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(roll), roll); err != nil {
			return false, err.Error(), nil
		}
		return roll.Status.State != common.StateHealthy, string(roll.Status.State), nil
	})

	// Restored into a new CAS of the same name, before it is created.
	out = e.mustCLI(t, "cas", "restore", "--cluster", "default/ha", file)
	if !strings.Contains(out, "cloister cas recover --cluster default/ha") {
		t.Errorf("cloister cas restore: %s", out)
	}
	if _, err := e.cli("cas", "restore", "--cluster", "default/ha", file); err == nil || !strings.Contains(err.Error(), "already has a state") {
		t.Errorf("a second restore over the first: %v", err)
	}
	fresh := simCAS("ha")
	fresh.Spec.Replicas = 3
	fresh.Spec.SimulationKeys = simKeys
	if err := e.crs.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	c := waitCondition(t, e.crs, fresh, health.IsHealthy, health.ReasonCASRecovery)
	t.Logf("the restored CAS waits for its owners: %s", c.Message)
	shares := filepath.Join(work.dir, "ha-shares.json")
	for _, k := range work.recoveryKeys[:2] {
		waitFor(t, "the restored CAS to take an owner's share", time.Minute, func(context.Context) (bool, string, error) {
			out, err := e.cli(append([]string{"cas", "recover", "--shares", shares, "--key", k}, haAt...)...)
			return err == nil, fmt.Sprint(out, err), nil
		})
	}
	waitState(t, e.crs, fresh, common.StateHealthy)
	gotCA, gotEnv, err := e.haAttest(filepath.Join(work.dir, "backup-after"))
	if err != nil || gotCA != rootCA || gotEnv != env {
		t.Errorf("after the restore: the same root CA %v, the same secret %v, %v", gotCA == rootCA, gotEnv == env, err)
	}
	waitState(t, e.crs, roll, common.StateHealthy)
	if roll.Status.CASRootCA != fresh.Status.RootCA || roll.Status.Revision != 1 {
		t.Errorf("the policy after the restore: %+v (CAS root CA %s)", roll.Status, fresh.Status.RootCA)
	}
}
