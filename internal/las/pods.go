package las

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

// ErrPodDeparts is returned when the calling pod does not run what its
// policy says: no evidence may name that policy.
var ErrPodDeparts = errors.New("the pod does not run what its policy annotation says")

// Pods finds who calls LAS in simulation: the pod of this node with the
// caller's address. On hardware the guest's own evidence carries the pod
// policy's digest; in simulation LAS, the node side, vouches for it, so a
// pod cannot claim another's policy. It watches the pods of its node
// (one list, then changes), so an attestation costs the API server
// nothing.
type Pods struct {
	Client kubernetes.Interface
	Node   string

	byIP cache.Indexer
}

const podIPIndex = "podIP"

// Start watches the node's pods until ctx ends; it returns once the
// first list is in.
func (p *Pods) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(p.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", p.Node).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	err := inf.AddIndexers(cache.Indexers{podIPIndex: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		var ips []string
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return ips, nil
	}})
	if err != nil {
		return err
	}
	p.byIP = inf.GetIndexer()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("listing the pods of node %s (%v)", p.Node, typ)
		}
	}
	return nil
}

// HostData returns the policy digest of the pod at ip, or nil when no
// pod of this node has that address (a process of the node itself) or
// the pod has no policy annotation; an error wrapping ErrPodDeparts when
// the pod's spec departs from its policy.
func (p *Pods) HostData(_ context.Context, ip string) ([]byte, string, error) {
	if p.byIP == nil {
		return nil, "", errors.New("the pods of the node are not watched yet")
	}
	objs, err := p.byIP.ByIndex(podIPIndex, ip)
	if err != nil {
		return nil, "", err
	}
	var list []corev1.Pod
	for _, o := range objs {
		list = append(list, *o.(*corev1.Pod))
	}
	var found []*corev1.Pod
	for i := range list {
		pod := &list[i]
		// Finished pods may keep an address a new pod has now; host
		// network pods share the node's and cannot be told apart.
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || pod.Spec.HostNetwork {
			continue
		}
		found = append(found, pod)
	}
	switch len(found) {
	case 0:
		return nil, "", nil
	case 1:
	default:
		return nil, "", fmt.Errorf("%d running pods of node %s have address %s", len(found), p.Node, ip)
	}
	pod := found[0]
	name := pod.Namespace + "/" + pod.Name
	value, ok := pod.Annotations[podpolicy.Annotation]
	if !ok {
		return nil, name, nil
	}
	policy, digest, err := podpolicy.FromAnnotation(value)
	if err != nil {
		return nil, name, fmt.Errorf("pod %s: %w", name, err)
	}
	if err := policy.Check(&pod.Spec, pod.Annotations); err != nil {
		return nil, name, fmt.Errorf("pod %s: %w: %w (run cloister generate again and set the new manifest)", name, ErrPodDeparts, err)
	}
	d, _ := hex.DecodeString(digest)
	return d, name, nil
}
