package vault

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// A replica's certificate from CAS lasts its policy's validity, and
// Vault reads its TLS files when it starts. The initializer attests a pod
// once, at its start, so a replica renews its certificate by being
// replaced: its pod deleted, it starts again, attests, and unseals itself
// through CAS. One at a time: Renewal picks none while a replica is not
// serving unsealed. (An eviction would honour the Vault's budget too, but
// no admission policy can bound an eviction by the pod it names, so the
// operator may delete only the pods it labels as its own.)

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

// renew deletes the replica's pod, the one read (by UID): the
// StatefulSet starts it again with a new certificate.
func (k *Kind) renew(ctx context.Context, r Replica) error {
	pod := r.Pod
	if err := k.Writer.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil {
		return fmt.Errorf("replacing %s to renew its certificate (ends %s): %w", pod.Name, r.Health.NotAfter.Format(time.RFC3339), err)
	}
	log.FromContext(ctx).Info("replaced a Vault replica to renew its certificate from CAS", "pod", pod.Name, "notAfter", r.Health.NotAfter)
	return nil
}
