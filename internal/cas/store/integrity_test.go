package store

import (
	"bytes"
	"errors"
	"testing"
)

// snapshot is every record of s as stored, by bucket and key.
func snapshot(t *testing.T, s Store) map[[2]string][]byte {
	t.Helper()
	out := map[[2]string][]byte{}
	if err := s.View(func(tx Tx) error {
		buckets, err := tx.Buckets()
		if err != nil {
			return err
		}
		for _, b := range buckets {
			if err := tx.ForEach(b, func(k string, v []byte) error { out[[2]string{b, k}] = v; return nil }); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func write(t *testing.T, s Store, bucket, key string, value []byte) {
	t.Helper()
	if err := s.Update(func(tx Tx) error {
		if value == nil {
			return tx.Delete(bucket, key)
		}
		return tx.Put(bucket, key, value)
	}); err != nil {
		t.Fatal(err)
	}
}

// update runs fn at the state's current generation.
func update(enc *Encrypted, s Store, fn func(Tx) error) error {
	at, err := enc.Verify(s)
	if err != nil {
		return err
	}
	_, err = enc.Update(s, at, fn)
	return err
}

func TestIntegrity(t *testing.T) {
	enc, _ := NewEncrypted(bytes.Repeat([]byte{7}, 32), "meta")
	put := func(t *testing.T, s Store, bucket, key, value string) {
		t.Helper()
		if err := update(enc, s, func(tx Tx) error { return tx.Put(bucket, key, []byte(value)) }); err != nil {
			t.Fatal(err)
		}
	}
	// history: generation 1..4 of a small state; each case tampers with
	// the final state using what it saw at an earlier point.
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, s Store, before map[[2]string][]byte)
		ok     bool
	}{
		{name: "untouched", tamper: func(*testing.T, Store, map[[2]string][]byte) {}, ok: true},
		{name: "an older copy of one record", tamper: func(t *testing.T, s Store, before map[[2]string][]byte) {
			write(t, s, "policies", "a", before[[2]string{"policies", "a"}])
		}},
		{name: "an older copy of the plain record", tamper: func(t *testing.T, s Store, before map[[2]string][]byte) {
			write(t, s, "meta", "seed", before[[2]string{"meta", "seed"}])
		}},
		{name: "an older digest with today's records", tamper: func(t *testing.T, s Store, before map[[2]string][]byte) {
			write(t, s, integrityBucket, integrityKey, before[[2]string{integrityBucket, integrityKey}])
		}},
		{name: "a record removed", tamper: func(t *testing.T, s Store, _ map[[2]string][]byte) {
			write(t, s, "policies", "b", nil)
		}},
		{name: "a removed record put back", tamper: func(t *testing.T, s Store, before map[[2]string][]byte) {
			write(t, s, "secrets", "gone", before[[2]string{"secrets", "gone"}])
		}},
		{name: "a record added in a new bucket", tamper: func(t *testing.T, s Store, _ map[[2]string][]byte) {
			write(t, s, "extra", "x", []byte("anything"))
		}},
		{name: "the digest removed", tamper: func(t *testing.T, s Store, _ map[[2]string][]byte) {
			write(t, s, integrityBucket, integrityKey, nil)
		}},
		{name: "the whole state of an earlier point", tamper: func(t *testing.T, s Store, before map[[2]string][]byte) {
			now := snapshot(t, s)
			for k := range now {
				write(t, s, k[0], k[1], nil)
			}
			for k, v := range before {
				write(t, s, k[0], k[1], v)
			}
		}, ok: true}, // undetectable without a hardware counter: docs/security.md
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, t.TempDir())
			defer func() { _ = s.Close() }()
			put(t, s, "meta", "seed", "commitment-1")
			put(t, s, "policies", "a", "v1")
			put(t, s, "policies", "b", "v1")
			if err := update(enc, s, func(tx Tx) error { return tx.Put("secrets", "gone", []byte("k")) }); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, s)
			put(t, s, "policies", "a", "v2")
			put(t, s, "meta", "seed", "commitment-2")
			if err := update(enc, s, func(tx Tx) error { return tx.Delete("secrets", "gone") }); err != nil {
				t.Fatal(err)
			}
			if gen, err := enc.Verify(s); err != nil || gen != 7 {
				t.Fatalf("before tampering: generation %d, %v", gen, err)
			}
			tc.tamper(t, s, before)
			_, err := enc.Verify(s)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrIntegrity)) {
				t.Errorf("verify after tampering: %v", err)
			}
		})
	}
}

func TestIntegrityEmptyStateAndFailedUpdate(t *testing.T) {
	enc, _ := NewEncrypted(bytes.Repeat([]byte{7}, 32))
	s := open(t, t.TempDir())
	defer func() { _ = s.Close() }()
	if gen, err := enc.Verify(s); gen != 0 || err != nil {
		t.Fatalf("empty state: %d %v", gen, err)
	}
	// An update that writes nothing leaves the generation alone.
	if err := update(enc, s, func(tx Tx) error { _, err := tx.Get("policies", "a"); return err }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := update(enc, s, func(tx Tx) error {
		if err := tx.Put("policies", "a", []byte("x")); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	// The same key twice in one update counts once.
	if err := update(enc, s, func(tx Tx) error {
		if err := tx.Put("policies", "a", []byte("1")); err != nil {
			return err
		}
		return tx.Put("policies", "a", []byte("2"))
	}); err != nil {
		t.Fatal(err)
	}
	if gen, err := enc.Verify(s); gen != 1 || err != nil {
		t.Fatalf("after one update: %d %v", gen, err)
	}
	// A change decided at an older generation is refused, and writes nothing.
	if _, err := enc.Update(s, 0, func(tx Tx) error { return tx.Put("policies", "b", []byte("late")) }); !errors.Is(err, ErrConflict) {
		t.Errorf("a change decided at generation 0 on generation 1: %v", err)
	}
	if err := enc.View(s, func(tx Tx) error {
		if v, _ := tx.Get("policies", "b"); v != nil {
			t.Errorf("the refused change wrote %q", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Another key cannot open the digest.
	other, _ := NewEncrypted(bytes.Repeat([]byte{8}, 32))
	if _, err := other.Verify(s); !errors.Is(err, ErrTampered) {
		t.Errorf("another key: %v", err)
	}
}

func BenchmarkVerify1000(b *testing.B) {
	enc, _ := NewEncrypted(bytes.Repeat([]byte{7}, 32))
	s, err := OpenBolt(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	value := bytes.Repeat([]byte{1}, 4096)
	if err := update(enc, s, func(tx Tx) error {
		for i := range 1000 {
			if err := tx.Put("policies", string(rune('a'+i%26))+string(rune(i)), value); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := enc.Verify(s); err != nil {
			b.Fatal(err)
		}
	}
}
