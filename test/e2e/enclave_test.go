//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

const nedSample = "nitroenclavedeployment-sample"

// nedIs waits until the NED's STATUS and READY columns read status and
// ready for its latest generation.
func nedIs(t testing.TB, crs client.Client, ned *enclavev1beta1.NitroEnclaveDeployment, status enclavev1beta1.DeploymentStatus, ready string, timeout time.Duration) {
	t.Helper()
	waitFor(t, fmt.Sprintf("NED %s to be %s %s", ned.Name, status, ready), timeout, func(ctx context.Context) (bool, string, error) {
		if err := crs.Get(ctx, client.ObjectKeyFromObject(ned), ned); err != nil {
			return false, err.Error(), nil
		}
		st := ned.Status
		why := ""
		if h := findCondition(st.Conditions, "IsHealthy"); h != nil {
			why = h.Message
		}
		return st.Status == status && (ready == "" || st.Ready == ready) && st.ObservedGeneration == ned.Generation,
			fmt.Sprintf("status %q ready %q state %s (%s), conditions %v", st.Status, st.Ready, st.State, why, notDesired(st.Conditions)), nil
	})
}

// nedPods lists the NED's live enclave pods.
func nedPods(t testing.TB, crs client.Client, ned *enclavev1beta1.NitroEnclaveDeployment) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := crs.List(context.Background(), &pods, client.InNamespace(ned.Namespace), client.MatchingLabels{
		service.LabelOwnerKind: "NitroEnclaveDeployment", service.LabelOwnerName: ned.Name}); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// The NitroEnclaveDeployment lifecycle on the simulated nodes (the
// operator beside the cluster; kwok runs the pods): the sample is
// SCHEDULED, then READY 1/1; kubectl shows READY and STATUS; scaled, its
// pods go to Nitro nodes only, and a fifth pod on a node with four enclave
// devices waits, Insufficient aws.ec2.nitro/nitro_enclaves, which the NED
// says; a HorizontalPodAutoscaler scales it; a Deployment the API server refuses is ERROR with the cause in
// `kubectl describe`, and SCHEDULED once fixed; an idle NED costs no
// writes; deleting it removes the Deployment and its pods.
func TestNitroEnclaveDeployment(t *testing.T) {
	c, cs, crs, op := sharedOperator(t)
	ctx := context.Background()
	ned := &enclavev1beta1.NitroEnclaveDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: nedSample}}
	applied := time.Now()
	if out, err := kubectl(t, c, "apply", "-f", "config/samples/enclave_v1beta1_nitroenclavedeployment.yaml"); err != nil {
		t.Fatalf("applying the sample: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = kubectl(t, c, "delete", "--ignore-not-found", "--timeout=60s", "-f", "config/samples/enclave_v1beta1_nitroenclavedeployment.yaml")
	})
	nedIs(t, crs, ned, enclavev1beta1.DeploymentScheduled, "", time.Minute)
	t.Logf("apply -> SCHEDULED in %s", time.Since(applied).Round(time.Millisecond))
	nedIs(t, crs, ned, enclavev1beta1.DeploymentScheduled, "1/1", 2*time.Minute)
	t.Logf("apply -> READY 1/1 in %s (simulated node)", time.Since(applied).Round(time.Millisecond))

	out, err := kubectl(t, c, "get", "ned", nedSample)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME READY STATUS AGE" ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), nedSample+" 1/1 SCHEDULED ") {
		t.Errorf("kubectl get ned: %v\n%s", err, out)
	}

	// Idle: a converged NED costs no writes.
	time.Sleep(3 * time.Second)
	before := op.apiRequests(t)
	time.Sleep(15 * time.Second)
	for method, n := range op.apiRequests(t) {
		if d := n - before[method]; method != "GET" && d > 0 {
			t.Errorf("%v %s requests while the NED was idle", d, method)
		}
	}

	nitroNodes := map[string]bool{}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: tee.LabelNitro + "=true"})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("no Nitro node: %v", err)
	}
	for _, n := range nodes.Items {
		nitroNodes[n.Name] = true
	}
	if len(nodes.Items) != 1 {
		t.Fatalf("%d Nitro nodes; the capacity step expects the default cluster's one", len(nodes.Items))
	}

	// kubectl scale: three pods, on Nitro nodes only.
	if out, err := kubectl(t, c, "scale", "ned", nedSample, "--replicas", "3", "-n", "default"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	nedIs(t, crs, ned, enclavev1beta1.DeploymentScheduled, "3/3", 2*time.Minute)
	for _, p := range nedPods(t, crs, ned) {
		if !nitroNodes[p.Spec.NodeName] {
			t.Errorf("enclave pod %s on %s, not a Nitro node", p.Name, p.Spec.NodeName)
		}
	}
	// What an HPA reads: the selector finds the three pods.
	sel, err := labels.Parse(ned.Status.Selector)
	var selected corev1.PodList
	if err == nil {
		err = crs.List(ctx, &selected, client.InNamespace("default"), client.MatchingLabelsSelector{Selector: sel})
	}
	if err != nil || len(selected.Items) != 3 {
		t.Errorf("status.selector %q selects %d pods: %v", ned.Status.Selector, len(selected.Items), err)
	}

	// Five on a node with four enclave devices: the fifth waits, and the
	// NED says why.
	if out, err := kubectl(t, c, "scale", "ned", nedSample, "--replicas", "5", "-n", "default"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	nedIs(t, crs, ned, enclavev1beta1.DeploymentScheduled, "4/5", 2*time.Minute)
	var pending []string
	for _, p := range nedPods(t, crs, ned) {
		if p.Spec.NodeName == "" {
			pending = append(pending, p.Name)
		}
	}
	if len(pending) != 1 {
		t.Fatalf("pending enclave pods %v, want one", pending)
	}
	waitFor(t, "a FailedScheduling event naming the enclave device", time.Minute, func(ctx context.Context) (bool, string, error) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": pending[0], "reason": "FailedScheduling"}.String()})
		if err != nil || len(evs.Items) == 0 {
			return false, fmt.Sprint(err), nil
		}
		return strings.Contains(evs.Items[0].Message, "Insufficient "+string(cluster.ResourceNitroEnclaves)), evs.Items[0].Message, nil
	})
	waitFor(t, "the NED to name the unschedulable pod", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := crs.Get(ctx, client.ObjectKeyFromObject(ned), ned); err != nil {
			return false, err.Error(), nil
		}
		h := findCondition(ned.Status.Conditions, "IsHealthy")
		return h != nil && strings.Contains(h.Message, "pod "+pending[0]+" cannot be scheduled") &&
			strings.Contains(h.Message, "Insufficient "+string(cluster.ResourceNitroEnclaves)), fmt.Sprintf("%+v", h), nil
	})
	if out, err := kubectl(t, c, "scale", "ned", nedSample, "--replicas", "1", "-n", "default"); err != nil {
		t.Fatalf("kubectl scale: %v\n%s", err, out)
	}
	nedIs(t, crs, ned, enclavev1beta1.DeploymentScheduled, "1/1", 2*time.Minute)

	// A HorizontalPodAutoscaler scales the NED through its scale
	// subresource (to its minimum: the dev cluster has no metrics).
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: nedSample},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: enclavev1beta1.GroupVersion.String(), Kind: "NitroEnclaveDeployment", Name: nedSample},
			MinReplicas:    ptr[int32](2), MaxReplicas: 2,
		}}
	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nedIs(t, crs, ned, enclavev1beta1.DeploymentScheduled, "2/2", 2*time.Minute)
	if err := cs.AutoscalingV2().HorizontalPodAutoscalers("default").Delete(ctx, nedSample, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// A Deployment the API server refuses (requests above limits).
	bad := `apiVersion: enclave.cloister.dev/v1beta1
kind: NitroEnclaveDeployment
metadata: {name: ned-bad, namespace: default}
spec:
  resources: {requests: {cpu: "2"}, limits: {cpu: LIMIT}}
  userPlugins: [{name: app, image: registry.example/app:1, command: [/app]}]
`
	file := writeFile(t, t.TempDir()+"/bad.yaml", strings.Replace(bad, "LIMIT", `"1"`, 1))
	if out, err := kubectl(t, c, "apply", "-f", file); err != nil {
		t.Fatalf("applying: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = kubectl(t, c, "delete", "--ignore-not-found", "--wait=false", "ned", "ned-bad", "-n", "default")
	})
	badNED := &enclavev1beta1.NitroEnclaveDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ned-bad"}}
	nedIs(t, crs, badNED, enclavev1beta1.DeploymentError, "", time.Minute)
	const cause = "must be less than or equal to cpu limit"
	waitFor(t, "kubectl describe to show why", time.Minute, func(context.Context) (bool, string, error) {
		out, err := kubectl(t, c, "describe", "ned", "ned-bad", "-n", "default")
		return err == nil && strings.Contains(out, "DeploymentFailed") && strings.Contains(out, cause), out, nil
	})
	writeFile(t, file, strings.Replace(bad, "LIMIT", `"2"`, 1))
	if out, err := kubectl(t, c, "apply", "-f", file); err != nil {
		t.Fatalf("applying the fix: %v\n%s", err, out)
	}
	nedIs(t, crs, badNED, enclavev1beta1.DeploymentScheduled, "1/1", 2*time.Minute)
	if out, _ := kubectl(t, c, "describe", "ned", "ned-bad", "-n", "default"); !strings.Contains(out, "Scheduled") {
		t.Errorf("kubectl describe after the fix:\n%s", out)
	}

	// Deleting the NED removes the Deployment and the pods.
	if out, err := kubectl(t, c, "delete", "ned", nedSample, "-n", "default", "--wait=true", "--timeout=120s"); err != nil {
		t.Fatalf("deleting: %v\n%s", err, out)
	}
	waitFor(t, "the enclave pods and their Deployment to go", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		_, err := cs.AppsV1().Deployments("default").Get(ctx, "ned-"+nedSample, metav1.GetOptions{})
		pods := nedPods(t, crs, ned)
		return err != nil && len(pods) == 0, fmt.Sprintf("Deployment: %v, %d pods", err, len(pods)), nil
	})
}
