package vault

import (
	"context"
	"fmt"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// A replica's certificate from CAS lasts its policy's validity, and
// Vault reads its TLS files when it starts. The initializer attests a pod
// once, at its start, so a replica renews its certificate by being
// replaced: evicted (the Vault's PodDisruptionBudget lets one go at a
// time), it starts again, attests, and unseals itself through CAS.

// renewWithin is the part of a certificate's lifetime left when it is
// renewed: a third, as cert-manager renews by default.
const renewWithin = 3

// dueForRenewal says the replica's certificate has less than a third of
// its lifetime left at now.
func dueForRenewal(h *Health, now time.Time) bool {
	if h == nil || h.NotAfter.IsZero() || !h.NotAfter.After(h.NotBefore) {
		return false
	}
	return h.NotAfter.Sub(now) < h.NotAfter.Sub(h.NotBefore)/renewWithin
}

// Renewal picks the replica to replace now for a new certificate: none
// unless every replica the spec asks for serves unsealed (the others keep
// the quorum and serve meanwhile) and no pod is on its way out; else the
// one whose certificate ends first among those due.
func Renewal(want int32, rs []Replica, now time.Time) (Replica, bool) {
	if len(rs) < int(want) {
		return Replica{}, false
	}
	var pick Replica
	for _, r := range rs {
		if r.Health == nil || !r.Health.Initialized || r.Health.Sealed || r.Pod == nil || r.Pod.DeletionTimestamp != nil {
			return Replica{}, false
		}
		if dueForRenewal(r.Health, now) && (pick.Health == nil || r.Health.NotAfter.Before(pick.Health.NotAfter)) {
			pick = r
		}
	}
	return pick, pick.Health != nil
}

// Evicter evicts pods (the eviction subresource honours the Vault's
// PodDisruptionBudget); the manager's client is one.
type Evicter interface {
	SubResource(subResource string) client.SubResourceClient
}

// renew evicts the replica's pod, the one read (by UID): the StatefulSet
// starts it again with a new certificate. A budget that allows no
// disruption now refuses; the next pass tries again.
func (k *Kind) renew(ctx context.Context, r Replica) error {
	pod := r.Pod
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}}
	if err := k.Evicter.SubResource("eviction").Create(ctx, pod, ev); err != nil {
		return fmt.Errorf("evicting %s to renew its certificate (ends %s): %w", pod.Name, r.Health.NotAfter.Format(time.RFC3339), err)
	}
	log.FromContext(ctx).Info("evicted a Vault replica to renew its certificate from CAS", "pod", pod.Name, "notAfter", r.Health.NotAfter)
	return nil
}
