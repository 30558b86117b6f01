// Package kubestore keeps CAS's state on the Kubernetes API, so that the
// replicas of a CAS share it through etcd rather than through a protocol
// of their own: one CASStateRecord object per record, and a head object
// whose resourceVersion orders every transaction.
//
// A transaction commits by one compare-and-swap of the head, which carries
// the state's next generation and the records the transaction wrote (its
// journal); only then are the record objects written, each marked with
// the generation that wrote it. Two replicas that commit on the same head
// cannot both win: the loser gets records.ErrConflict and reads the state
// again. A crash between the head and its records loses nothing: whoever
// reads the head next applies its journal, and no transaction commits
// before the journal of the one before it is applied.
//
// Every replica holds the state in memory, as of the head it read last,
// and takes in what other replicas commit by watching the head. Nothing
// here is trusted: store.Encrypted seals the values and refuses, at
// unlock, a state that does not match its digest.
package kubestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/store/records"
)

// LabelCAS names the CAS whose state an object holds.
const LabelCAS = "cloister.dev/cas"

// maxTransaction bounds what one transaction writes, so that its head
// stays well inside the API server's limit on an object (about 1.5 MiB).
const maxTransaction = 1 << 20

// Store is CAS's state on the API.
type Store struct {
	c         client.WithWatch
	ns, name  string
	log       *slog.Logger
	timeout   time.Duration
	updateMu  sync.Mutex // one local transaction at a time
	mu        sync.RWMutex
	data      map[string]map[string][]byte // bucket → key → value as stored
	gen       int64
	headRV    string
	journal   []servicesv1beta1.CASStateEntry // the head's, until applied
	listeners []func()
}

// Options of a Store.
type Options struct {
	// Namespace and CAS name the CAS whose state this is.
	Namespace, CAS string
	Log            *slog.Logger
	// Timeout bounds each call to the API; default 10 s.
	Timeout time.Duration
}

// Open reads the state of a CAS from the API.
func Open(ctx context.Context, c client.WithWatch, opts Options) (*Store, error) {
	if opts.Namespace == "" || opts.CAS == "" {
		return nil, errors.New("the namespace and name of the CAS whose state this is are required")
	}
	s := &Store{c: c, ns: opts.Namespace, name: opts.CAS, log: opts.Log, timeout: opts.Timeout}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.timeout == 0 {
		s.timeout = 10 * time.Second
	}
	if err := s.reload(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// HeadName is the name of a CAS's head object.
func HeadName(cas string) string { return cas + "-head" }

// recordName is the object of one record: named by a digest of its bucket
// and key, which may hold any character.
func (s *Store) recordName(bucket, key string) string {
	h := sha256.Sum256([]byte(bucket + "\x00" + key))
	return s.name + "-" + hex.EncodeToString(h[:16])
}

func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// reload reads the whole state in one list, so at one revision of etcd:
// the head, every record object, and the head's journal over them (a
// record object is written only after the head that commits it, so none
// is newer than the head in one list).
func (s *Store) reload(ctx context.Context) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	list := &servicesv1beta1.CASStateRecordList{}
	if err := s.c.List(cctx, list, client.InNamespace(s.ns), client.MatchingLabels{LabelCAS: s.name}); err != nil {
		return fmt.Errorf("reading CAS %s/%s's state: %w", s.ns, s.name, err)
	}
	data := map[string]map[string][]byte{}
	var head *servicesv1beta1.CASStateRecord
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name == HeadName(s.name) {
			head = o
			continue
		}
		if len(o.Spec.Records) != 1 {
			return fmt.Errorf("CAS state object %s holds %d records, want 1", o.Name, len(o.Spec.Records))
		}
		e := o.Spec.Records[0]
		if s.recordName(e.Bucket, e.Key) != o.Name {
			return fmt.Errorf("CAS state object %s holds record %s/%s, which belongs in another object", o.Name, e.Bucket, e.Key)
		}
		put(data, e)
	}
	var gen int64
	var rv string
	var journal []servicesv1beta1.CASStateEntry
	if head != nil {
		gen, rv, journal = head.Spec.Generation, head.ResourceVersion, head.Spec.Records
		for _, e := range journal {
			put(data, e)
		}
	}
	s.mu.Lock()
	s.data, s.gen, s.headRV, s.journal = data, gen, rv, journal
	s.mu.Unlock()
	return nil
}

func put(data map[string]map[string][]byte, e servicesv1beta1.CASStateEntry) {
	if e.Deleted {
		delete(data[e.Bucket], e.Key)
		if len(data[e.Bucket]) == 0 {
			delete(data, e.Bucket)
		}
		return
	}
	if data[e.Bucket] == nil {
		data[e.Bucket] = map[string][]byte{}
	}
	data[e.Bucket][e.Key] = e.Value
}

// Generation is the state's generation as this replica last read it.
func (s *Store) Generation() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// OnChange calls fn after the store took in a transaction another
// replica committed.
func (s *Store) OnChange(fn func()) {
	s.mu.Lock()
	s.listeners = append(s.listeners, fn)
	s.mu.Unlock()
}

func (s *Store) View(fn func(records.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return fn(&tx{base: s.data, readOnly: true})
}

func (s *Store) Update(fn func(records.Tx) error) error {
	ctx := context.Background()
	s.updateMu.Lock()
	defer s.updateMu.Unlock()
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	s.mu.RLock()
	t := &tx{base: s.data, writes: map[[2]string]*servicesv1beta1.CASStateEntry{}}
	err := fn(t)
	gen, rv := s.gen, s.headRV
	s.mu.RUnlock()
	if err != nil || len(t.writes) == 0 {
		return err
	}
	journal := t.journal()
	size := 0
	for _, e := range journal {
		size += len(e.Bucket) + len(e.Key) + len(e.Value)
	}
	if size > maxTransaction {
		return fmt.Errorf("a transaction of %d bytes is more than the %d the state's head holds", size, maxTransaction)
	}
	head := &servicesv1beta1.CASStateRecord{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: HeadName(s.name), Labels: map[string]string{LabelCAS: s.name}, ResourceVersion: rv},
		Spec:       servicesv1beta1.CASStateRecordSpec{Generation: gen + 1, Records: journal},
	}
	cctx, cancel := s.call(ctx)
	if rv == "" {
		err = s.c.Create(cctx, head)
	} else {
		err = s.c.Update(cctx, head)
	}
	cancel()
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		if rerr := s.reload(ctx); rerr != nil {
			s.log.Warn("reading the state after a conflict", "error", rerr.Error())
		} else {
			s.notify()
		}
		return fmt.Errorf("%w: another replica of CAS changed the state first (generation %d)", records.ErrConflict, gen+1)
	}
	if err != nil {
		return fmt.Errorf("committing generation %d of CAS's state: %w", gen+1, err)
	}
	s.mu.Lock()
	for _, e := range journal {
		put(s.data, e)
	}
	s.gen, s.headRV, s.journal = gen+1, head.ResourceVersion, journal
	s.mu.Unlock()
	// Committed: a failure to write the records now is repaired by the
	// next transaction or reader, which applies the journal first.
	if err := s.apply(ctx); err != nil {
		s.log.Warn("writing the records of a committed transaction; the next one writes them", "generation", gen+1, "error", err.Error())
	}
	return nil
}

// catchUp makes sure the state in memory is the head's, and the head's
// journal is written to the records, before a new transaction.
func (s *Store) catchUp(ctx context.Context) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	head := &servicesv1beta1.CASStateRecord{}
	err := s.c.Get(cctx, client.ObjectKey{Namespace: s.ns, Name: HeadName(s.name)}, head)
	switch {
	case apierrors.IsNotFound(err):
		head.ResourceVersion = ""
	case err != nil:
		return fmt.Errorf("reading the head of CAS's state: %w", err)
	}
	s.mu.RLock()
	same := head.ResourceVersion == s.headRV
	s.mu.RUnlock()
	if !same {
		if err := s.reload(ctx); err != nil {
			return err
		}
		s.notify()
	}
	return s.apply(ctx)
}

// apply writes the head's journal to the record objects, once.
func (s *Store) apply(ctx context.Context) error {
	s.mu.RLock()
	journal, gen := s.journal, s.gen
	s.mu.RUnlock()
	for _, e := range journal {
		if err := s.write(ctx, e, gen); err != nil {
			return err
		}
	}
	s.mu.Lock()
	if s.gen == gen {
		s.journal = nil
	}
	s.mu.Unlock()
	return nil
}

// write makes one record object say what generation gen wrote, unless a
// later generation already wrote it.
func (s *Store) write(ctx context.Context, e servicesv1beta1.CASStateEntry, gen int64) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	key := client.ObjectKey{Namespace: s.ns, Name: s.recordName(e.Bucket, e.Key)}
	for range 5 {
		cur := &servicesv1beta1.CASStateRecord{}
		err := s.c.Get(cctx, key, cur)
		switch {
		case apierrors.IsNotFound(err):
			if e.Deleted {
				return nil
			}
			obj := &servicesv1beta1.CASStateRecord{
				ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: key.Name, Labels: map[string]string{LabelCAS: s.name}},
				Spec:       servicesv1beta1.CASStateRecordSpec{Generation: gen, Records: []servicesv1beta1.CASStateEntry{e}},
			}
			err = s.c.Create(cctx, obj)
		case err != nil:
			return err
		case cur.Spec.Generation >= gen:
			return nil
		case e.Deleted:
			err = s.c.Delete(cctx, cur, client.Preconditions{ResourceVersion: &cur.ResourceVersion})
			if apierrors.IsNotFound(err) {
				return nil
			}
		default:
			cur.Spec = servicesv1beta1.CASStateRecordSpec{Generation: gen, Records: []servicesv1beta1.CASStateEntry{e}}
			err = s.c.Update(cctx, cur)
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return fmt.Errorf("record %s/%s: the object kept changing under generation %d", e.Bucket, e.Key, gen)
}

func (s *Store) notify() {
	s.mu.RLock()
	fns := slices.Clone(s.listeners)
	s.mu.RUnlock()
	for _, fn := range fns {
		fn()
	}
}

func (s *Store) Close() error { return nil }
