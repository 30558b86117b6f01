package kubestore

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/store/backup"
)

// A backup of one CAS's state restores into a CAS that has none (under
// another name too), where the root seed's key opens it whole; a replica
// watching that CAS takes it in; a CAS with a state is never overwritten.
func TestBackupAndRestore(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	ns := namespace(t, c)
	key := bytes.Repeat([]byte{7}, 32)
	enc, _ := store.NewEncrypted(key, "sealed")
	src := open(t, c, ns)
	at := uint64(0)
	for i, k := range []string{"a", "b", "c"} {
		var err error
		at, err = enc.Update(src, at, func(tx store.Tx) error {
			return tx.Put("secrets", k, bytes.Repeat([]byte(k), 100+i))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	b, err := backup.Export(src, ns+"/cas", time.Now())
	if err != nil {
		t.Fatal(err)
	}

	// A replica of the new CAS already runs (uninitialised) and watches.
	dst := Options{Namespace: ns, CAS: "restored"}
	watcher, err := Open(ctx, c, dst)
	if err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	watcher.OnChange(func() { changes.Add(1) })
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go watcher.Watch(wctx, time.Hour)

	if err := Restore(ctx, c, dst, b); err != nil {
		t.Fatal(err)
	}
	restored, err := Open(ctx, c, dst)
	if err != nil {
		t.Fatal(err)
	}
	if gen, err := enc.Verify(restored); err != nil || gen != at {
		t.Fatalf("the restored state: generation %d, %v; want %d", gen, err, at)
	}
	if got := get(t, restored, "secrets", "c"); got != get(t, src, "secrets", "c") {
		t.Errorf("record c restored as %q", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := enc.Verify(watcher); err == nil && changes.Load() > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := enc.Verify(watcher); err != nil || changes.Load() == 0 {
		t.Errorf("the running replica did not take in the restored state: %v (%d changes)", err, changes.Load())
	}
	// Restored CAS writes on: its next transaction commits.
	if _, err := enc.Update(restored, at, func(tx store.Tx) error { return tx.Put("secrets", "d", []byte("x")) }); err != nil {
		t.Errorf("writing after the restore: %v", err)
	}

	// Never over a state.
	before := get(t, src, "secrets", "a")
	for _, o := range []Options{dst, {Namespace: ns, CAS: "cas"}} {
		if err := Restore(ctx, c, o, b); !errors.Is(err, ErrHasState) {
			t.Errorf("restoring over CAS %s: %v", o.CAS, err)
		}
	}
	if got := get(t, open(t, c, ns), "secrets", "a"); got != before {
		t.Error("restoring over the source changed its state")
	}
}
