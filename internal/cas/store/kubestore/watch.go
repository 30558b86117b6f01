package kubestore

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
)

// Watch takes in what other replicas commit until ctx ends: it watches the
// head, and reads it again every resync in case a watch missed an event.
func (s *Store) Watch(ctx context.Context, resync time.Duration) {
	if resync == 0 {
		resync = 30 * time.Second
	}
	for ctx.Err() == nil {
		s.watchOnce(ctx, resync)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) watchOnce(ctx context.Context, resync time.Duration) {
	if err := s.refresh(ctx); err != nil {
		s.log.Warn("reading CAS's state", "error", err.Error())
		return
	}
	s.mu.RLock()
	rv := s.headRV
	s.mu.RUnlock()
	w, err := s.c.Watch(ctx, &servicesv1beta1.CASStateRecordList{}, client.InNamespace(s.ns),
		&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", HeadName(s.name)), Raw: &metav1.ListOptions{ResourceVersion: rv}})
	if err != nil {
		s.log.Warn("watching CAS's state", "error", err.Error())
		return
	}
	defer w.Stop()
	tick := time.NewTicker(resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := s.refresh(ctx); err != nil {
				s.log.Warn("reading CAS's state", "error", err.Error())
			}
		case _, ok := <-w.ResultChan():
			if !ok {
				return
			}
			if err := s.refresh(ctx); err != nil {
				s.log.Warn("reading CAS's state", "error", err.Error())
			}
		}
	}
}

// Sync takes in what other replicas committed until now.
func (s *Store) Sync() error { return s.refresh(context.Background()) }

// refresh reads the state again when its head moved.
func (s *Store) refresh(ctx context.Context) error {
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	cctx, cancel := s.call(ctx)
	defer cancel()
	head := &servicesv1beta1.CASStateRecord{}
	err := s.c.Get(cctx, client.ObjectKey{Namespace: s.ns, Name: HeadName(s.name)}, head)
	if apierrors.IsNotFound(err) {
		head.ResourceVersion = ""
	} else if err != nil {
		return err
	}
	s.mu.RLock()
	same := head.ResourceVersion == s.headRV
	s.mu.RUnlock()
	if same {
		return nil
	}
	if err := s.reload(ctx); err != nil {
		return err
	}
	s.notify()
	return nil
}
