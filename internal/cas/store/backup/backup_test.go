package backup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/store"
)

// state is a sealed state in a bolt store with a secret and a plain slot.
func state(t *testing.T, key []byte) store.Store {
	t.Helper()
	s, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	enc, _ := store.NewEncrypted(key, "sealed")
	_, err = enc.Update(s, 0, func(tx store.Tx) error {
		if err := tx.Put("secrets", "team/db", []byte("the database password")); err != nil {
			return err
		}
		return tx.Put("sealed", "node-a", []byte("a seed sealed to node a"))
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// restore writes b into an empty bolt store, as a restore does.
func restore(t *testing.T, b *Backup) store.Store {
	t.Helper()
	s, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	err = s.Update(func(tx store.Tx) error {
		for _, r := range b.Records {
			if err := tx.Put(r.Bucket, r.Key, r.Value); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A backup round-trips into a state the root seed's key opens, with nothing
// secret in the clear; another key opens nothing; a record dropped, added
// or changed in the backup is refused at unlock.
func TestBackupOpensOnlyWithTheSeed(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	b, err := Export(state(t, key), "team/cas", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("database password")) || strings.Contains(string(raw), "ZGF0YWJhc2UgcGFzc3dvcmQ") {
		t.Fatal("the backup holds a secret in the clear")
	}
	back, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := store.NewEncrypted(key, "sealed")
	var got []byte
	if _, err := enc.Load(restore(t, back), func(tx store.Tx) error {
		got, err = tx.Get("secrets", "team/db")
		return err
	}); err != nil || string(got) != "the database password" {
		t.Fatalf("restored: %q, %v", got, err)
	}
	other, _ := store.NewEncrypted(bytes.Repeat([]byte{8}, 32), "sealed")
	if _, err := other.Verify(restore(t, back)); err == nil {
		t.Error("another key opened the backup")
	}
	for name, edit := range map[string]func(*Backup){
		"dropped": func(b *Backup) {
			for i, r := range b.Records {
				if r.Bucket == "sealed" {
					b.Records = append(b.Records[:i], b.Records[i+1:]...)
					return
				}
			}
		},
		"added": func(b *Backup) {
			b.Records = append(b.Records, Record{Bucket: "secrets", Key: "team/extra", Value: []byte("x")})
		},
		"changed": func(b *Backup) {
			b.Records[0].Value = append([]byte(nil), b.Records[0].Value[:len(b.Records[0].Value)-1]...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := Parse(raw)
			edit(c)
			if _, err := enc.Verify(restore(t, c)); err == nil {
				t.Error("a tampered backup unlocked")
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	good := func() *Backup {
		return &Backup{Format: Format, CAS: "team/cas", Records: []Record{{Bucket: "integrity", Key: "state", Value: []byte{1}}, {Bucket: "secrets", Key: "a", Value: []byte{2}}}}
	}
	raw := func(b *Backup) []byte {
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if _, err := Parse(raw(good())); err != nil {
		t.Fatalf("a good backup: %v", err)
	}
	for _, tt := range []struct {
		name string
		data []byte
		says string
	}{
		{"unknown field", []byte(`{"format":"` + Format + `","cas":"a/b","records":[],"extra":1}`), "extra"},
		{"another format", raw(func() *Backup { b := good(); b.Format = "v0"; return b }()), "format"},
		{"no namespace", raw(func() *Backup { b := good(); b.CAS = "cas"; return b }()), "NAMESPACE/NAME"},
		{"empty", raw(func() *Backup { b := good(); b.Records = nil; return b }()), "empty"},
		{"no integrity record", raw(func() *Backup { b := good(); b.Records = b.Records[1:]; return b }()), "integrity"},
		{"twice", raw(func() *Backup { b := good(); b.Records = append(b.Records, b.Records[1]); return b }()), "twice"},
		{"long key", raw(func() *Backup { b := good(); b.Records[1].Key = strings.Repeat("k", maxKey+1); return b }()), "records[1].key"},
		{"too big", make([]byte, MaxSize+1), "more than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse(tt.data); err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("error %v, want one that says %q", err, tt.says)
			}
		})
	}
	if _, err := Export(mustBolt(t), "team/cas", time.Now()); !errors.Is(err, ErrEmpty) {
		t.Errorf("exporting an empty state: %v", err)
	}
}

func mustBolt(t *testing.T) store.Store {
	s, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Backups go into a folder by time; only the newest keep of the CAS's
// own stay, whatever else is there.
func TestSaveKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, FileName("team/cas-x", time.Now()))
	if err := os.WriteFile(other, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "team_cas-notes.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &Backup{Format: Format, CAS: "team/cas", Records: []Record{{Bucket: "integrity", Key: "state", Value: []byte{1}}}}
	start := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	var paths []string
	for i := range 5 {
		b.Taken = start.Add(time.Duration(i) * time.Hour)
		p, err := Save(dir, b, 3)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	if filepath.Base(paths[0]) != "team_cas-20261127T090000Z.json" {
		t.Errorf("named %s", paths[0])
	}
	for i, p := range paths {
		_, err := os.Stat(p)
		if kept := i >= 2; kept != (err == nil) {
			t.Errorf("backup %d: kept %v, stat %v", i, kept, err)
		}
	}
	if st, err := os.Stat(paths[4]); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the new backup: %v, %v", st, err)
	}
	for _, p := range []string{other, filepath.Join(dir, "team_cas-notes.json")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("another file was removed: %v", err)
		}
	}
	if data, err := os.ReadFile(paths[4]); err != nil {
		t.Fatal(err)
	} else if got, err := Parse(data); err != nil || !got.Taken.Equal(b.Taken) {
		t.Errorf("read back: %v, %v", got, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"format":"` + Format + `","cas":"team/cas","taken":"2026-11-27T00:00:00Z","records":[{"bucket":"integrity","key":"state","value":"AQ=="}]}`))
	f.Add([]byte(`{"format":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Parse(data)
		if err != nil {
			return
		}
		// What parses validates, and survives a round trip.
		if err := b.Validate(); err != nil {
			t.Fatalf("parsed but invalid: %v", err)
		}
		out, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}

// A state of 1000 records of 4 KiB, exported, written as JSON and read
// back strictly: what a scheduled backup and a restore cost.
func BenchmarkBackup(b *testing.B) {
	s, err := store.OpenBolt(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	enc, _ := store.NewEncrypted(bytes.Repeat([]byte{7}, 32))
	value := bytes.Repeat([]byte{1}, 4096)
	if _, err := enc.Update(s, 0, func(tx store.Tx) error {
		for i := range 1000 {
			if err := tx.Put("secrets", fmt.Sprintf("team/%04d", i), value); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var size int
	for b.Loop() {
		bk, err := Export(s, "team/cas", time.Now())
		if err != nil {
			b.Fatal(err)
		}
		raw, err := json.Marshal(bk)
		if err != nil {
			b.Fatal(err)
		}
		size = len(raw)
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size)/1024/1024, "MiB/backup")
}
