//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/store/kubestore"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// What whoever holds CAS's service account token can do to its state on
// the API (a pod run as that account, a node's root where CAS runs, the
// admin) is deny service, never take CAS: with the token a pod of CAS's
// namespace mounts, CAS's CASStateRecord objects are deleted under the
// running replica of cas-db (recovered by its owners in the step before),
// which leaves Ready and says why instead of serving an empty state on
// which names would be first come; a squat of its policy is refused; an
// older backup restored there is refused by CAS until the recovery owners
// accept its generation; and after a restart on a wiped state, an init
// with a token the admin wrote into the Secret is refused by CAS, whose
// status names the owners' ways back, and the owners' signed init makes a
// new CAS.
func testCASStateWipedUnderIt(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	cas := &servicesv1beta1.CAS{}
	if err := e.crs.Get(ctx, client.ObjectKey{Namespace: "default", Name: "cas-db"}, cas); err != nil {
		t.Fatal(err)
	}
	waitState(t, e.crs, cas, common.StateHealthy)
	at := []string{"--cluster", "default/cas-db", "--insecure-simulated-cas"}
	shares := filepath.Join(work.dir, "db-shares.json")
	backup := filepath.Join(work.dir, "db-backup.json")
	e.mustCLI(t, "cas", "backup", "--cluster", "default/cas-db", "--out", backup)
	// The state moves on past the backup: the policy's version 2.
	v1 := filepath.Join(work.dir, "db-shop.yaml")
	e.mustCLI(t, append([]string{"cas", "register", e.signPolicy(t, "db-shop-v2", policyDoc(work.ownerPub, "48h"), work.owner, v1)}, at...)...)
	waitFor(t, "the operator to record the state's generation", time.Minute, func(ctx context.Context) (bool, string, error) {
		err := e.crs.Get(ctx, client.ObjectKeyFromObject(cas), cas)
		return err == nil && cas.Status.StateGeneration > 0, fmt.Sprintf("stateGeneration %d", cas.Status.StateGeneration), err
	})

	// CAS's own service account, with a token as its pods mount one.
	wipe := func() {
		t.Helper()
		tok, err := e.cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "cas-cas-db", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := e.c.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		asCAS := rest.AnonymousClientConfig(cfg)
		asCAS.BearerToken = tok.Status.Token
		c, err := client.New(asCAS, client.Options{Scheme: e.crs.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		// Its role lists and deletes them one by one (no deletecollection).
		var records servicesv1beta1.CASStateRecordList
		if err := c.List(ctx, &records, client.InNamespace("default"), client.MatchingLabels{kubestore.LabelCAS: "cas-db"}); err != nil {
			t.Fatalf("listing CAS's state as its service account: %v", err)
		}
		for i := range records.Items {
			if err := c.Delete(ctx, &records.Items[i]); err != nil {
				t.Fatalf("deleting CAS's state as its service account: %v", err)
			}
		}
		t.Logf("deleted %d CASStateRecord objects of cas-db with its service account's token", len(records.Items))
	}
	wipe()
	c := waitCondition(t, e.crs, cas, health.IsHealthy, health.ReasonCASStateLost)
	if !strings.Contains(c.Message, "the state was removed") || cas.Status.CASStateAlert != 1 {
		t.Errorf("the status after the state was deleted under CAS: alert %d, %q", cas.Status.CASStateAlert, c.Message)
	}
	e.waitPod(t, "default", conn.PodName("cas-db"), "to leave Ready", time.Minute, func(p *corev1.Pod) bool { return !podReady(p) })
	squatter := filepath.Join(work.dir, "squatter.pem")
	squatterPub := e.mustCLI(t, "policy", "keygen", "--out", squatter)
	squatSrc := writeFile(t, filepath.Join(work.dir, "db-squat.policy.yaml"), policyDoc(squatterPub, "24h"))
	squat := writeFile(t, filepath.Join(work.dir, "db-squat.yaml"), e.mustCLI(t, "policy", "sign", "--key", squatter, "--cas-address", "cas-db.default.svc:8081", "--version", "1", squatSrc))
	if out, err := e.cli(append([]string{"cas", "register", squat}, at...)...); err == nil || !strings.Contains(err.Error(), "recovery") {
		t.Errorf("a squat of default/shop on the emptied state: %v\n%s", err, out)
	}

	// The older backup, restored where nothing is now: CAS refuses it,
	// naming its generation, until the owners accept it.
	e.mustCLI(t, "cas", "restore", "--cluster", "default/cas-db", backup)
	recover := func(key string, extra ...string) (string, error) {
		return e.cli(append(append([]string{"cas", "recover", "--shares", shares, "--key", key}, at...), extra...)...)
	}
	if out, err := recover(work.recoveryKeys[0]); err != nil || !strings.Contains(out, "1 more needed") {
		t.Fatalf("the first share on the restored state: %v\n%s", err, out)
	}
	_, err := recover(work.recoveryKeys[1])
	m := regexp.MustCompile(`the state is at generation (\d+), older than generation (\d+)`).FindStringSubmatch(fmt.Sprint(err))
	if m == nil {
		t.Fatalf("CAS took the older backup on the owners' shares alone: %v", err)
	}
	t.Logf("CAS refuses the restored state: generation %s, below %s", m[1], m[2])
	// One acceptance of the two the threshold needs is not enough.
	if _, err := recover(work.recoveryKeys[0], "--accept-generation", m[1]); err == nil || !strings.Contains(err.Error(), "older than generation") {
		t.Errorf("one owner's acceptance: %v", err)
	}
	if out, err := recover(work.recoveryKeys[1], "--accept-generation", m[1]); err != nil || !strings.Contains(out, "CAS is ready") {
		t.Fatalf("the second owner's acceptance: %v\n%s", err, out)
	}
	waitState(t, e.crs, cas, common.StateHealthy)
	if cas.Status.CASStateAlert != 0 {
		t.Errorf("casStateAlert %d after the owners accepted", cas.Status.CASStateAlert)
	}

	// A restart on a wiped state, with a token the admin wrote: refused.
	wipe()
	pod, err := e.cs.CoreV1().Pods("default").Get(ctx, conn.PodName("cas-db"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "default", pod.Name, "to run again", 2*time.Minute, func(p *corev1.Pod) bool {
		return p.UID != pod.UID && p.Status.Phase == corev1.PodRunning
	})
	c = waitCondition(t, e.crs, cas, health.IsHealthy, health.ReasonCASStateLost)
	if !strings.Contains(c.Message, "--approve-key") {
		t.Errorf("the status after a restart on a wiped state: %q", c.Message)
	}
	secret, err := e.cs.CoreV1().Secrets("default").Get(ctx, conn.InitTokenSecret("cas-db"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secret.Data[conn.InitTokenKey]) != 0 {
		t.Errorf("the init token Secret still holds a token after CAS was initialised")
	}
	secret.Data = map[string][]byte{conn.InitTokenKey: []byte("a-token-the-admin-wrote")}
	if _, err := e.cs.CoreV1().Secrets("default").Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(work.dir, "db-fresh-owner.pem")
	freshPub := writeFile(t, fresh+".pub", e.mustCLI(t, "policy", "keygen", "--out", fresh))
	newInit := append([]string{"cas", "init", "--recovery-owner", freshPub, "--out", filepath.Join(work.dir, "db-fresh-shares.json")}, at...)
	if out, err := e.cli(newInit...); err == nil || !strings.Contains(err.Error(), "an init token never initialises it again") {
		t.Errorf("an init with the admin's token after the loss: %v\n%s", err, out)
	}
	out := e.mustCLI(t, append(newInit, "--approve-key", work.recoveryKeys[0], "--approve-key", work.recoveryKeys[2])...)
	if !strings.Contains(out, "CAS initialised") {
		t.Errorf("the owners' signed init: %s", out)
	}
	waitState(t, e.crs, cas, common.StateHealthy)
}
