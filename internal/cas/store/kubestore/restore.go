package kubestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/store/backup"
	"github.com/cloister-cc/cloister/internal/cas/store/records"
)

// AnnotationRestored, on a head, says when a backup was restored into it.
const AnnotationRestored = "cloister.dev/restored"

// ErrHasState: a restore goes only into a CAS that has no state.
var ErrHasState = errors.New("CAS already has a state")

// Restore writes records, a whole exported state, as the state of the CAS
// opts names, which must have none. The integrity record goes first, in
// the new head's journal, so that a replica initialising CAS meanwhile
// finds the state begun and gives way; the head is written again at the
// end, which makes running replicas read the whole state (and, finding it
// sealed under a seed they lack, wait in recovery for the owners).
func Restore(ctx context.Context, c client.WithWatch, opts Options, b *backup.Backup) error {
	if err := b.Validate(); err != nil {
		return err
	}
	s, err := Open(ctx, c, opts)
	if err != nil {
		return err
	}
	s.mu.RLock()
	n, gen := 0, s.gen
	for _, bucket := range s.data {
		n += len(bucket)
	}
	s.mu.RUnlock()
	if n > 0 || gen > 0 {
		return fmt.Errorf("%w (%d records at generation %d): a backup is restored only into a CAS without one; to replace it, delete its state first (kubectl delete casstaterecords -n %s -l %s=%s)",
			ErrHasState, n, gen, s.ns, LabelCAS, s.name)
	}
	var first []servicesv1beta1.CASStateEntry
	rest := make([]servicesv1beta1.CASStateEntry, 0, len(b.Records))
	for _, r := range b.Records {
		e := servicesv1beta1.CASStateEntry{Bucket: r.Bucket, Key: r.Key, Value: r.Value}
		if records.IsIntegrity(e.Bucket, e.Key) {
			first = append(first, e)
		} else {
			rest = append(rest, e)
		}
	}
	if len(first) != 1 {
		return errors.New("the records hold no integrity record: not a whole CAS state")
	}
	head := &servicesv1beta1.CASStateRecord{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: HeadName(s.name), Labels: map[string]string{LabelCAS: s.name}},
		Spec:       servicesv1beta1.CASStateRecordSpec{Generation: 1, Records: first},
	}
	cctx, cancel := s.call(ctx)
	err = c.Create(cctx, head)
	cancel()
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: it was begun while the backup was being restored", ErrHasState)
	}
	if err != nil {
		return fmt.Errorf("writing the head of CAS %s/%s's state: %w", s.ns, s.name, err)
	}
	for _, e := range append(first, rest...) {
		if err := s.write(ctx, e, 1); err != nil {
			return fmt.Errorf("writing record %s/%s: %w", e.Bucket, e.Key, err)
		}
	}
	// Done: the journal is applied, and the head moves so that watchers
	// read the whole state.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cctx, cancel := s.call(ctx)
		defer cancel()
		cur := &servicesv1beta1.CASStateRecord{}
		if err := c.Get(cctx, client.ObjectKeyFromObject(head), cur); err != nil {
			return err
		}
		if cur.Spec.Generation != 1 {
			return fmt.Errorf("%w: a replica wrote generation %d while the backup was being restored", ErrHasState, cur.Spec.Generation)
		}
		cur.Spec = servicesv1beta1.CASStateRecordSpec{Generation: 2}
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, AnnotationRestored, time.Now().UTC().Format(time.RFC3339))
		return c.Update(cctx, cur)
	})
}
