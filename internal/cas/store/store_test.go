package store

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func open(t *testing.T, dir string) *Bolt {
	t.Helper()
	b, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBoltRoundTripAndRollback(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	if err := b.Update(func(tx Tx) error {
		if err := tx.Put("policies", "a", []byte("1")); err != nil {
			return err
		}
		return tx.Put("policies", "b", []byte("2"))
	}); err != nil {
		t.Fatal(err)
	}
	// A failing update leaves nothing of itself.
	boom := errors.New("boom")
	if err := b.Update(func(tx Tx) error {
		if err := tx.Put("policies", "a", []byte("changed")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Put("policies", "c", []byte("3")); err != nil {
			t.Fatal(err)
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("update error %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = open(t, dir)
	defer func() { _ = b.Close() }()
	got := map[string]string{}
	if err := b.View(func(tx Tx) error {
		return tx.ForEach("policies", func(k string, v []byte) error { got[k] = string(v); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"] != "1" || got["b"] != "2" {
		t.Errorf("after reopen: %v", got)
	}
	if err := b.View(func(tx Tx) error {
		if v, err := tx.Get("nothing", "x"); v != nil || err != nil {
			t.Errorf("missing bucket: %q %v", v, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestSecondProcessIsRefused(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	defer func() { _ = b.Close() }()
	if _, err := OpenBolt(dir); err == nil || !strings.Contains(err.Error(), "another CAS uses it") {
		t.Errorf("second open: %v", err)
	}
}

func TestEncrypted(t *testing.T) {
	dir := t.TempDir()
	b := open(t, dir)
	defer func() { _ = b.Close() }()
	key := bytes.Repeat([]byte{7}, 32)
	enc, _ := NewEncrypted(key)
	secret := []byte("the database password")
	if _, err := enc.Update(b, 0, func(tx Tx) error { return tx.Put("secrets", "db", secret) }); err != nil {
		t.Fatal(err)
	}
	if err := b.View(func(tx Tx) error {
		raw, _ := tx.Get("secrets", "db")
		if bytes.Contains(raw, secret) {
			t.Error("the value is stored in the clear")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := enc.View(b, func(tx Tx) error {
		if v, err := tx.Get("secrets", "db"); err != nil || !bytes.Equal(v, secret) {
			t.Errorf("opened %q %v", v, err)
		}
		if err := tx.Put("secrets", "x", nil); !errors.Is(err, errReadOnly) {
			t.Errorf("a write in View: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	other, _ := NewEncrypted(bytes.Repeat([]byte{8}, 32))
	if err := other.View(b, func(tx Tx) error {
		if _, err := tx.Get("secrets", "db"); !errors.Is(err, ErrTampered) {
			t.Errorf("another key: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A sealed value copied to another key does not open there.
	if err := b.Update(func(tx Tx) error {
		raw, _ := tx.Get("secrets", "db")
		return tx.Put("secrets", "api", raw)
	}); err != nil {
		t.Fatal(err)
	}
	if err := enc.View(b, func(tx Tx) error {
		if _, err := tx.Get("secrets", "api"); !errors.Is(err, ErrTampered) {
			t.Errorf("moved value: %v", err)
		}
		err := tx.ForEach("secrets", func(string, []byte) error { return nil })
		if !errors.Is(err, ErrTampered) {
			t.Errorf("ForEach over a moved value: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
