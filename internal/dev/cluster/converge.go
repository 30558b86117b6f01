package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// createWorkers bounds concurrent node writes; the apiserver's default
// max-in-flight is 400 and kwok's controller shares it.
const createWorkers = 32

const pollInterval = 100 * time.Millisecond

// reconcileNodes makes the managed nodes exactly DesiredNode(0..n-1):
// missing ones are created, drifted labels and resources are patched back,
// and managed nodes beyond n are deleted.
func reconcileNodes(ctx context.Context, cs kubernetes.Interface, n int) error {
	existing, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{LabelManagedBy: managedByValue}.String(),
	})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	byName := make(map[string]*corev1.Node, len(existing.Items))
	for i := range existing.Items {
		byName[existing.Items[i].Name] = &existing.Items[i]
	}

	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(createWorkers)
	for i := range n {
		want := DesiredNode(i)
		have := byName[want.Name]
		delete(byName, want.Name)
		g.Go(func() error { return ensureNode(ctx, cs, want, have) })
	}
	for name := range byName {
		g.Go(func() error {
			err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting surplus node %s: %w", name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// ensureNode creates want, or patches have back to it where `dev up` owns
// the fields (labels, annotations, capacity, allocatable).
func ensureNode(ctx context.Context, cs kubernetes.Interface, want, have *corev1.Node) error {
	nodes := cs.CoreV1().Nodes()
	if have == nil {
		_, err := nodes.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating node %s: %w", want.Name, err)
		}
		// An unmanaged node of the same name: adopt it below.
		if have, err = nodes.Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("reading node %s: %w", want.Name, err)
		}
	}
	if !containsAll(have.Labels, want.Labels) || !containsAll(have.Annotations, want.Annotations) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"labels": want.Labels, "annotations": want.Annotations}})
		if _, err := nodes.Patch(ctx, want.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patching labels of node %s: %w", want.Name, err)
		}
	}
	if !sameResources(have.Status.Capacity, want.Status.Capacity) ||
		!sameResources(have.Status.Allocatable, want.Status.Allocatable) {
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{
			"capacity": want.Status.Capacity, "allocatable": want.Status.Allocatable}})
		if _, err := nodes.PatchStatus(ctx, want.Name, patch); err != nil {
			return fmt.Errorf("patching resources of node %s: %w", want.Name, err)
		}
	}
	return nil
}

func containsAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func sameResources(have, want corev1.ResourceList) bool {
	return maps.EqualFunc(have, want, func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })
}

// waitAPIServer waits until /readyz answers ok.
func waitAPIServer(ctx context.Context, cs kubernetes.Interface) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, pollInterval, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-apiserver to be ready: %w (last: %w)", err, last)
	}
	return nil
}

// waitNodesReady waits until exactly the n managed nodes are Ready and
// returns them. It watches rather than polls: re-listing a thousand nodes
// several times a second would compete with kwok for the CPU.
func waitNodesReady(ctx context.Context, cs kubernetes.Interface, n int) ([]corev1.Node, error) {
	selector := labels.Set{LabelManagedBy: managedByValue}.String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return cs.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return cs.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	nodes := map[string]*corev1.Node{}
	ready := map[string]bool{}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		node, ok := e.Object.(*corev1.Node)
		if !ok {
			return false, nil
		}
		if e.Type == watch.Deleted {
			delete(nodes, node.Name)
			delete(ready, node.Name)
		} else {
			nodes[node.Name] = node
			if isReady(node) {
				ready[node.Name] = true
			} else {
				delete(ready, node.Name)
			}
		}
		return len(nodes) == n && len(ready) == n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %d nodes to be Ready (%d of %d are): %w", n, len(ready), len(nodes), err)
	}
	out := make([]corev1.Node, 0, len(nodes))
	for _, node := range nodes {
		out = append(out, *node)
	}
	return out, nil
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitDefaultServiceAccount waits for kube-controller-manager to create the
// default ServiceAccount: until then every pod in "default" is rejected.
func waitDefaultServiceAccount(ctx context.Context, cs kubernetes.Interface) error {
	err := wait.PollUntilContextTimeout(ctx, pollInterval, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount (kube-controller-manager): %w", err)
	}
	return nil
}
