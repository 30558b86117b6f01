package tlog

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/cloister-cc/cloister/internal/cas/store"
)

// logOf is a log of n entries in a real store (CAS's bolt file), each
// appended in a transaction of its own, as CAS appends them; at, if not
// nil, replaces entry i's text (a fork).
func logOf(t testing.TB, n int, at func(i int) string) store.Store {
	t.Helper()
	s, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for i := range n {
		entry := fmt.Sprintf("policy default/shop version %d", i+1)
		if at != nil {
			entry = at(i)
		}
		err := s.Update(func(tx store.Tx) error {
			got, err := Append(tx, []byte(entry))
			if err == nil && got != int64(i) {
				err = fmt.Errorf("appended as %d, want %d", got, i)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func u64(i int64) uint64 { return uint64(i) } //nolint:gosec // sizes and indexes here are small and positive

func entryText(i int) string { return fmt.Sprintf("policy default/shop version %d", i+1) }

func bytesOf(hs []tlog.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// The log's roots, inclusion and consistency proofs are what
// transparency-dev's merkle (an implementation of RFC 6962 of its own)
// computes and accepts, at sizes around tile and subtree edges.
func TestProofsAgainstAnIndependentImplementation(t *testing.T) {
	const n = 300
	s := logOf(t, n, nil)
	h := rfc6962.DefaultHasher
	roots := map[int64][]byte{}
	rng := (&compact.RangeFactory{Hash: h.HashChildren}).NewEmptyRange(0)
	err := s.View(func(tx store.Tx) error {
		for size := int64(1); size <= n; size++ {
			if err := rng.Append(h.HashLeaf([]byte(entryText(int(size-1)))), nil); err != nil {
				return err
			}
			want, err := rng.GetRootHash(nil)
			if err != nil {
				return err
			}
			got, err := TreeHash(tx, size)
			if err != nil {
				return err
			}
			if !bytes.Equal(got[:], want) {
				t.Errorf("root of %d: %x, merkle's %x", size, got, want)
			}
			roots[size] = want
		}
		for _, size := range []int64{1, 2, 3, 7, 8, 255, 256, 257, 299, 300} {
			for _, i := range []int64{0, 1, size / 2, size - 2, size - 1} {
				if i < 0 || i >= size {
					continue
				}
				p, err := ProveInclusion(tx, size, i)
				if err != nil {
					return err
				}
				leaf := h.HashLeaf([]byte(entryText(int(i))))
				if err := proof.VerifyInclusion(h, u64(i), u64(size), leaf, bytesOf(p), roots[size]); err != nil {
					t.Errorf("merkle refuses inclusion of %d in %d: %v", i, size, err)
				}
				var root tlog.Hash
				copy(root[:], roots[size])
				cp := Checkpoint{Origin: "o", Size: size, Hash: root}
				if err := VerifyInclusion(cp, i, []byte(entryText(int(i))), p); err != nil {
					t.Errorf("inclusion of %d in %d: %v", i, size, err)
				}
				if err := VerifyInclusion(cp, i, []byte("another entry"), p); err == nil {
					t.Errorf("another entry included as %d in %d", i, size)
				}
			}
			for _, old := range []int64{1, 2, 7, 8, 128, 255, 256, size - 1, size} {
				if old < 1 || old > size {
					continue
				}
				p, err := ProveConsistency(tx, size, old)
				if err != nil {
					return err
				}
				if err := proof.VerifyConsistency(h, u64(old), u64(size), bytesOf(p), roots[old], roots[size]); err != nil {
					t.Errorf("merkle refuses %d as a prefix of %d: %v", old, size, err)
				}
				var o, nw tlog.Hash
				copy(o[:], roots[old])
				copy(nw[:], roots[size])
				if err := VerifyConsistency(Checkpoint{Origin: "o", Size: old, Hash: o}, Checkpoint{Origin: "o", Size: size, Hash: nw}, p); err != nil {
					t.Errorf("%d as a prefix of %d: %v", old, size, err)
				}
			}
		}
		if _, err := ProveInclusion(tx, n+1, 0); err == nil {
			t.Error("a proof in a tree larger than the log")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A log that showed another history (entry 5 differs), or went back to
// a smaller tree, is caught by a client that saw the other checkpoint.
func TestForkAndRollbackRefused(t *testing.T) {
	a := logOf(t, 20, nil)
	b := logOf(t, 20, func(i int) string {
		if i == 5 {
			return "policy default/shop version 6 (another history)"
		}
		return entryText(i)
	})
	cp := func(s store.Store, size int64) (c Checkpoint, p tlog.TreeProof) {
		t.Helper()
		err := s.View(func(tx store.Tx) error {
			h, err := TreeHash(tx, size)
			c = Checkpoint{Origin: "o", Size: size, Hash: h}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return c, nil
	}
	seen, _ := cp(a, 10)
	forked, _ := cp(b, 20)
	var p tlog.TreeProof
	_ = b.View(func(tx store.Tx) (err error) { p, err = ProveConsistency(tx, 20, 10); return err })
	if err := VerifyConsistency(seen, forked, p); !errors.Is(err, ErrInconsistent) {
		t.Errorf("a fork: %v", err)
	}
	later, _ := cp(a, 20)
	if err := VerifyConsistency(later, seen, nil); !errors.Is(err, ErrInconsistent) || !strings.Contains(err.Error(), "smaller") {
		t.Errorf("a rollback: %v", err)
	}
	sameSize, _ := cp(b, 10)
	if err := VerifyConsistency(seen, sameSize, nil); !errors.Is(err, ErrInconsistent) {
		t.Errorf("two trees of one size: %v", err)
	}
}

// The tiles the log serves are what golang.org/x/mod's tile client reads
// its tree from; entry bundles hold the entries.
func TestTiles(t *testing.T) {
	const n = 300
	s := logOf(t, n, nil)
	err := s.View(func(tx store.Tx) error {
		root, err := TreeHash(tx, n)
		if err != nil {
			return err
		}
		tr := tlog.TileHashReader(tlog.Tree{N: n, Hash: root}, tileReader{tx})
		got, err := tlog.TreeHash(n, tr)
		if err != nil || got != root {
			t.Errorf("the tree read from tiles: %v %v, want %v", got, err, root)
		}
		if _, err := tlog.ProveRecord(n, 257, tr); err != nil {
			t.Errorf("a proof from tiles: %v", err)
		}
		full, err := ReadTile(tx, "tile/entries/000")
		if err != nil {
			return err
		}
		entries, err := SplitBundle(full)
		if err != nil || len(entries) != 256 || string(entries[255]) != entryText(255) {
			t.Errorf("the first bundle: %d entries, %v", len(entries), err)
		}
		partial, err := ReadTile(tx, "tile/entries/001.p/44")
		if err != nil {
			return err
		}
		if entries, err := SplitBundle(partial); err != nil || len(entries) != 44 || string(entries[0]) != entryText(256) {
			t.Errorf("the partial bundle: %d entries, %v", len(entries), err)
		}
		for _, path := range []string{"tile/entries/001", "tile/entries/001.p/45", "tile/0/001", "tile/1/000", "tile/2/000.p/1", "tile/0/x001/000"} {
			if _, err := ReadTile(tx, path); !errors.Is(err, ErrNoTile) {
				t.Errorf("%s of a log of %d: %v", path, n, err)
			}
		}
		if data, err := ReadTile(tx, "tile/1/000.p/1"); err != nil || len(data) != tlog.HashSize {
			t.Errorf("the level-1 tile: %d bytes, %v", len(data), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tileReader reads tiles through their C2SP paths.
type tileReader struct{ tx store.Tx }

func (r tileReader) Height() int { return TileHeight }
func (r tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		d, err := ReadTile(r.tx, TilePath(t))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", TilePath(t), err)
		}
		out[i] = d
	}
	return out, nil
}
func (r tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

func TestTilePaths(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"tile/0/000", true}, {"tile/0/x001/234", true}, {"tile/entries/000.p/7", true}, {"tile/3/x123/x456/789.p/255", true},
		{"tile/8/0/000", false}, {"tile/data/000", false}, {"tile/0/1234", false}, {"tile/0/000.p/0", false},
		{"tile/0/000.p/256", false}, {"tile/-1/000", false}, {"tiles/0/000", false}, {"tile/0/" + strings.Repeat("x000/", 12) + "000", false}, {"", false},
	} {
		tile, err := ParseTilePath(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v", tc.path, err)
		}
		if err == nil && TilePath(tile) != tc.path {
			t.Errorf("%q reads back as %q", tc.path, TilePath(tile))
		}
	}
}

// Checkpoints are signed notes of the log's origin: another origin, key
// or extension lines are refused.
func TestCheckpoints(t *testing.T) {
	s := logOf(t, 3, nil)
	skey, vkey, err := note.GenerateKey(rand.Reader, "cas-0123.cloister")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	var signed []byte
	if err := s.View(func(tx store.Tx) (err error) { signed, err = Sign(tx, "cas-0123.cloister/log", signer); return err }); err != nil {
		t.Fatal(err)
	}
	cp, err := ParseCheckpoint(signed, "cas-0123.cloister/log", verifier)
	if err != nil || cp.Size != 3 {
		t.Fatalf("%v %v\n%s", cp, err, signed)
	}
	if _, err := ParseCheckpoint(signed, "cas-4567.cloister/log", verifier); err == nil {
		t.Error("another origin accepted")
	}
	_, otherV, _ := note.GenerateKey(rand.Reader, "cas-0123.cloister")
	other, _ := note.NewVerifier(otherV)
	if _, err := ParseCheckpoint(signed, "cas-0123.cloister/log", other); err == nil {
		t.Error("another key accepted")
	}
	extended, _ := note.Sign(&note.Note{Text: "cas-0123.cloister/log\n3\n" + cp.Hash.String() + "\nextension\n"}, signer)
	if _, err := ParseCheckpoint(extended, "cas-0123.cloister/log", verifier); err == nil {
		t.Error("an extension line accepted")
	}
	if _, err := ParseCheckpoint(append(bytes.Repeat([]byte("x"), MaxCheckpoint), signed...), "cas-0123.cloister/log", verifier); err == nil {
		t.Error("an oversized checkpoint accepted")
	}
	// A signature's last base64 character with a stray bit: the same
	// bytes to a lenient decoder, another checkpoint to a byte compare.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	stray := bytes.Clone(signed)
	i := bytes.LastIndexByte(stray, '=') - 1
	stray[i] = alphabet[strings.IndexByte(alphabet, stray[i])^1]
	if _, err := note.Open(stray, note.VerifierList(verifier)); err != nil {
		t.Fatalf("the stray bit is not stray: %v", err)
	}
	if _, err := ParseCheckpoint(stray, "cas-0123.cloister/log", verifier); err == nil || !strings.Contains(err.Error(), "canonical base64") {
		t.Errorf("a signature with a stray bit: %v", err)
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, "cas.cloister")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	good, _ := note.Sign(&note.Note{Text: "cas.cloister/log\n3\n" + tlog.Hash{}.String() + "\n"}, signer)
	f.Add(good)
	f.Add([]byte("cas.cloister/log\n3\nAAAA\n\n— cas.cloister AAAA\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := ParseCheckpoint(data, "cas.cloister/log", verifier)
		if err == nil && (cp.Origin != "cas.cloister/log" || cp.Size < 0) {
			t.Fatalf("%+v", cp)
		}
	})
}

func FuzzParseTilePath(f *testing.F) {
	for _, p := range []string{"tile/0/000", "tile/entries/x001/002.p/3", "tile/63/000"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		tile, err := ParseTilePath(path)
		if err == nil && (TilePath(tile) != path || tile.W < 1 || tile.W > 256 || tile.N < 0) {
			t.Fatalf("%q: %+v", path, tile)
		}
	})
}

func FuzzSplitBundle(f *testing.F) {
	f.Add([]byte{0, 3, 'a', 'b', 'c', 0, 1, 'd'})
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := SplitBundle(data)
		if err != nil {
			return
		}
		var again []byte
		for _, e := range entries {
			again = binary.BigEndian.AppendUint16(again, uint16(len(e))) //nolint:gosec // a bundle's entry is at most 65535 bytes
			again = append(again, e...)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("%x reads as %d entries that write %x", data, len(entries), again)
		}
	})
}

// An entry reads back as written; anything else is refused.
func TestEntries(t *testing.T) {
	e := Entry{Type: PolicyVersion, Policy: NameHash("default/shop"), Version: 2, Digest: strings.Repeat("ab", 32), Predecessor: strings.Repeat("cd", 32), Record: strings.Repeat("ef", 32)}
	raw, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseEntry(raw); err != nil || got != e {
		t.Errorf("read back: %+v %v", got, err)
	}
	for _, bad := range []string{
		`{"type":"policy","policy":"` + NameHash("x") + `","version":1,"digest":"d","record":"r","extra":1}`,
		`{"type":"board","policy":"` + NameHash("x") + `","version":1,"digest":"d","record":"r"}`,
		`{"type":"policy","policy":"default/shop","version":1,"digest":"d","record":"r"}`,
		`{"type":"policy","policy":"` + NameHash("x") + `","version":0,"digest":"d","record":"r"}`,
		`{"type":"policy","policy":"` + NameHash("x") + `","version":1,"digest":"d"}`,
		`[]`, ``,
	} {
		if _, err := ParseEntry([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzParseEntry(f *testing.F) {
	good, _ := Entry{Type: PolicyVersion, Policy: NameHash("a"), Version: 1, Digest: "d", Record: "r"}.Marshal()
	f.Add(good)
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEntry(data)
		if err != nil {
			return
		}
		again, err := e.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ParseEntry(again); err != nil || back != e {
			t.Fatalf("%+v does not read back: %v", e, err)
		}
	})
}

// checkpointAt is the checkpoint of s's tree of size entries, signed as
// CAS signs it, and a fetch of s's tiles.
func checkpointAt(t testing.TB, s store.Store, size int64, signer note.Signer, verifier note.Verifier) (Checkpoint, FetchTile) {
	t.Helper()
	var cp Checkpoint
	err := s.View(func(tx store.Tx) error {
		h, err := TreeHash(tx, size)
		if err != nil {
			return err
		}
		signed, err := note.Sign(&note.Note{Text: fmt.Sprintf("cas.cloister/log\n%d\n%s\n", size, h)}, signer)
		if err != nil {
			return err
		}
		cp, err = ParseCheckpoint(signed, "cas.cloister/log", verifier)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return cp, func(path string) (data []byte, err error) {
		err = s.View(func(tx store.Tx) error { data, err = ReadTile(tx, path); return err })
		return data, err
	}
}

// A client's memory: it takes the first checkpoint, then only larger ones
// that extend it (proved from their tiles); a forked log of any size and
// a smaller tree are refused, and the memory keeps the largest.
func TestMemory(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, "cas.cloister")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	a := logOf(t, 40, nil)
	fork := logOf(t, 40, func(i int) string {
		if i == 3 {
			return "another history"
		}
		return entryText(i)
	})
	at := func(s store.Store, size int64) (Checkpoint, FetchTile) {
		return checkpointAt(t, s, size, signer, verifier)
	}
	m := Memory{File: filepath.Join(t.TempDir(), "log-checkpoint")}
	for _, size := range []int64{10, 10, 25} {
		cp, fetch := at(a, size)
		if err := m.Advance(cp, verifier, fetch); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
	}
	smaller, fetch := at(a, 20)
	if err := m.Advance(smaller, verifier, fetch); !errors.Is(err, ErrInconsistent) {
		t.Errorf("a smaller tree: %v", err)
	}
	for _, size := range []int64{25, 40} {
		forked, fetch := at(fork, size)
		if err := m.Advance(forked, verifier, fetch); !errors.Is(err, ErrInconsistent) {
			t.Errorf("a fork of size %d: %v", size, err)
		}
	}
	if kept, _ := os.ReadFile(m.File); !strings.Contains(string(kept), "\n25\n") {
		t.Errorf("the memory keeps %q, want the tree of 25", kept)
	}
	_, otherV, _ := note.GenerateKey(rand.Reader, "cas.cloister")
	other, _ := note.NewVerifier(otherV)
	later, fetch := at(a, 40)
	if err := m.Advance(later, other, fetch); err == nil || !strings.Contains(err.Error(), "not of this log") {
		t.Errorf("another key: %v", err)
	}
	if err := m.Advance(later, verifier, fetch); err != nil {
		t.Errorf("the log's next checkpoint: %v", err)
	}
}

// BenchmarkAppend appends policy-version entries, each in a transaction
// of its own, as CAS does, and reports the records and bytes the log
// keeps per entry (a record is an API object where CAS keeps its state on
// the API).
func BenchmarkAppend(b *testing.B) {
	s, err := store.OpenBolt(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	entry, _ := Entry{Type: PolicyVersion, Policy: NameHash("default/shop"), Version: 1, Digest: strings.Repeat("ab", 32),
		Predecessor: strings.Repeat("cd", 32), Record: strings.Repeat("ef", 32)}.Marshal()
	counter := &countingTx{}
	b.ResetTimer()
	for b.Loop() {
		err := s.Update(func(tx store.Tx) error {
			counter.Tx = tx
			_, err := Append(counter, entry)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(counter.puts)/float64(b.N), "records/op")
	b.ReportMetric(float64(counter.bytes)/float64(b.N), "stored-B/op")
	b.ReportMetric(float64(counter.bytes)/float64(b.N)*10000/(1<<20), "stored-MiB/10k-versions")
}

// countingTx counts what a transaction writes.
type countingTx struct {
	store.Tx
	puts, bytes int
}

func (c *countingTx) Put(bucket, key string, value []byte) error {
	c.puts++
	c.bytes += len(value)
	return c.Tx.Put(bucket, key, value)
}

// After the recovery owners take back an older state, CAS's log is that
// state's, shorter than the one a client saw, with an Accept entry after
// it: the client's memory is not extended, and HasAccept finds why. A log
// without one, or whose tiles are not what the checkpoint commits to,
// shows none.
func TestHasAccept(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, "cas.cloister")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	accept, err := Entry{Type: Accept, Version: 2, Digest: Digest([]byte("2"), []byte("4294967296"))}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := func(s store.Store) (Checkpoint, FetchTile) {
		var size int64
		if err := s.View(func(tx store.Tx) (err error) { size, err = Size(tx); return err }); err != nil {
			t.Fatal(err)
		}
		return checkpointAt(t, s, size, signer, verifier)
	}
	seen, _ := checkpoint(logOf(t, 300, nil))
	for _, tc := range []struct {
		name   string
		log    store.Store
		accept bool
	}{
		{"the older state's log, then the acceptance", logOf(t, 11, func(i int) string {
			if i == 10 {
				return string(accept)
			}
			return entryText(i)
		}), true},
		{"the acceptance, then more versions", logOf(t, 280, func(i int) string {
			if i == 10 {
				return string(accept)
			}
			return entryText(i)
		}), true},
		{"an older log alone", logOf(t, 10, nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, fetch := checkpoint(tc.log)
			if _, err := Extends(seen.Note, cp, verifier, fetch); err == nil {
				t.Fatal("the remembered log is extended")
			}
			got, err := HasAccept(cp, fetch)
			if err != nil || got != tc.accept {
				t.Errorf("HasAccept %v (%v), want %v", got, err, tc.accept)
			}
			// A server that shows other entries than the checkpoint
			// commits to is refused, not believed.
			lying := func(path string) ([]byte, error) {
				data, err := fetch(path)
				if err == nil && strings.Contains(path, "/entries/") {
					// The same length, so the bundle still splits.
					data = bytes.Replace(data, []byte("policy default/shop version 1"), accept[:29], 1)
				}
				return data, err
			}
			if _, err := HasAccept(cp, lying); err == nil {
				t.Error("entries the checkpoint does not commit to were read")
			}
		})
	}
}
