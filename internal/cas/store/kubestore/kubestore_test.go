package kubestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

// newClient is an admin client on the test's API server.
func newClient(t *testing.T) client.WithWatch {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := servicesv1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(envConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// namespace makes a namespace of the test's own.
func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubestore-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func open(t *testing.T, c client.WithWatch, ns string) *Store {
	t.Helper()
	s, err := Open(context.Background(), c, Options{Namespace: ns, CAS: "cas"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, s store.Store, bucket, key string) string {
	t.Helper()
	var v []byte
	if err := s.View(func(tx store.Tx) error {
		var err error
		v, err = tx.Get(bucket, key)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return string(v)
}

func putAll(s store.Store, kv ...string) error {
	return s.Update(func(tx store.Tx) error {
		for i := 0; i+1 < len(kv); i += 2 {
			if err := tx.Put("policies", kv[i], []byte(kv[i+1])); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestTransactionsReachEveryReplica(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	a, b := open(t, c, ns), open(t, c, ns)
	if err := putAll(a, "x", "1", "y", "2"); err != nil {
		t.Fatal(err)
	}
	// A failing transaction stores nothing.
	boom := errors.New("boom")
	if err := a.Update(func(tx store.Tx) error {
		_ = tx.Put("policies", "x", []byte("changed"))
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	// b takes the change in when it next writes, and deletes on top.
	if err := b.Update(func(tx store.Tx) error {
		if v, _ := tx.Get("policies", "x"); string(v) != "1" {
			return fmt.Errorf("b's transaction sees x=%q", v)
		}
		return tx.Delete("policies", "y")
	}); err != nil {
		t.Fatal(err)
	}
	// A replica started now reads the same.
	fresh := open(t, c, ns)
	if x, y := get(t, fresh, "policies", "x"), get(t, fresh, "policies", "y"); x != "1" || y != "" || fresh.Generation() != 2 {
		t.Errorf("a new replica reads x=%q y=%q at generation %d", x, y, fresh.Generation())
	}
	// One object per record, and the head; the deleted record is gone.
	list := &servicesv1beta1.CASStateRecordList{}
	if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Errorf("%d objects, want the head and x's", len(list.Items))
	}
	if err := fresh.View(func(tx store.Tx) error {
		buckets, _ := tx.Buckets()
		if len(buckets) != 1 || buckets[0] != "policies" {
			t.Errorf("buckets %v", buckets)
		}
		return tx.Put("policies", "z", nil)
	}); err == nil {
		t.Error("a write in a view was taken")
	}
}

// Two replicas that decide on the same head cannot both commit.
func TestConcurrentCommitsOneWins(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	a, b := open(t, c, ns), open(t, c, ns)
	if err := putAll(a, "x", "0"); err != nil {
		t.Fatal(err)
	}
	var ready sync.WaitGroup
	ready.Add(2)
	start := make(chan struct{})
	errs := make([]error, 2)
	var done sync.WaitGroup
	for i, s := range []*Store{a, b} {
		done.Add(1)
		go func() {
			defer done.Done()
			errs[i] = s.Update(func(tx store.Tx) error {
				ready.Done()
				<-start // both have read the same head
				return tx.Put("policies", "x", []byte(fmt.Sprint("replica", i)))
			})
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	won, lost := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, store.ErrConflict):
			lost++
		default:
			t.Errorf("update: %v", err)
		}
	}
	if won != 1 || lost != 1 {
		t.Fatalf("won %d, lost %d: %v", won, lost, errs)
	}
	// The loser read the winner's state.
	winner := "replica0"
	if errs[0] != nil {
		winner = "replica1"
	}
	for _, s := range []*Store{a, b} {
		if v := get(t, s, "policies", "x"); v != winner || s.Generation() != 2 {
			t.Errorf("x=%q at generation %d, want %s at 2", v, s.Generation(), winner)
		}
	}
}

// A crash after the head committed and before its records were written
// loses nothing: readers apply the journal, and the next transaction
// writes the records first.
func TestCommittedJournalIsAppliedAfterACrash(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	a := open(t, c, ns)
	if err := putAll(a, "x", "1"); err != nil {
		t.Fatal(err)
	}
	// The head of generation 2 as a crashed replica left it.
	head := &servicesv1beta1.CASStateRecord{}
	ctx := context.Background()
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: HeadName("cas")}, head); err != nil {
		t.Fatal(err)
	}
	head.Spec = servicesv1beta1.CASStateRecordSpec{Generation: 2, Records: []servicesv1beta1.CASStateEntry{
		{Bucket: "policies", Key: "x", Value: []byte("2")}, {Bucket: "policies", Key: "new", Value: []byte("n")}}}
	if err := c.Update(ctx, head); err != nil {
		t.Fatal(err)
	}
	b := open(t, c, ns)
	if x, n := get(t, b, "policies", "x"), get(t, b, "policies", "new"); x != "2" || n != "n" {
		t.Fatalf("after the crash: x=%q new=%q", x, n)
	}
	if err := putAll(b, "y", "3"); err != nil {
		t.Fatal(err)
	}
	// The record objects now hold generation 2's values: a replica that
	// reads them (and generation 3's journal) sees everything.
	obj := &servicesv1beta1.CASStateRecord{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: b.recordName("policies", "new")}, obj); err != nil {
		t.Fatalf("generation 2's record was not written: %v", err)
	}
	if obj.Spec.Generation != 2 || string(obj.Spec.Records[0].Value) != "n" {
		t.Errorf("record %+v", obj.Spec)
	}
	fresh := open(t, c, ns)
	if x, n, y := get(t, fresh, "policies", "x"), get(t, fresh, "policies", "new"), get(t, fresh, "policies", "y"); x != "2" || n != "n" || y != "3" {
		t.Errorf("a new replica reads x=%q new=%q y=%q", x, n, y)
	}
}

// A replica watching the head takes in another's commits and says so.
func TestWatchTakesInOtherReplicasCommits(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	a, b := open(t, c, ns), open(t, c, ns)
	changed := make(chan struct{}, 10)
	b.OnChange(func() { changed <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Watch(ctx, time.Hour)
	for i := range 3 {
		if err := putAll(a, "x", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(30 * time.Second)
		for get(t, b, "policies", "x") != fmt.Sprint(i) {
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("b never saw x=%d", i)
			}
		}
	}
	if b.Generation() != 3 {
		t.Errorf("b at generation %d", b.Generation())
	}
}

func TestObjectsThatDoNotHoldTheirRecordAreRefused(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	a := open(t, c, ns)
	if err := putAll(a, "x", "1", "y", "2"); err != nil {
		t.Fatal(err)
	}
	// y's object made to hold x: a record in another's place.
	ctx := context.Background()
	obj := &servicesv1beta1.CASStateRecord{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: a.recordName("policies", "y")}, obj); err != nil {
		t.Fatal(err)
	}
	obj.Spec.Records[0].Key = "x"
	if err := c.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, c, Options{Namespace: ns, CAS: "cas"}); err == nil {
		t.Error("a record in another record's object was read")
	}
}
