package tlog

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// FetchTile reads a tile by its C2SP path from wherever the log is
// served.
type FetchTile func(path string) ([]byte, error)

// tiles reads the tiles of one checkpoint's tree for x/mod's tile hash
// reader.
type tiles struct{ fetch FetchTile }

func (t tiles) Height() int { return TileHeight }
func (t tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, tile := range ts {
		data, err := t.fetch(TilePath(tile))
		if err != nil {
			return nil, fmt.Errorf("tile %s: %w", TilePath(tile), err)
		}
		out[i] = data
	}
	return out, nil
}
func (t tiles) SaveTiles([]tlog.Tile, [][]byte) {}

// Entries reads the entries from..to (not included) of cp's tree from its
// entry bundles; each bundle's entries are checked against the tree's
// hashes, read from its tiles, so a server cannot show other entries
// than the checkpoint commits to.
func Entries(cp Checkpoint, from, to int64, fetch FetchTile) ([][]byte, error) {
	if from < 0 || to > cp.Size || from > to {
		return nil, fmt.Errorf("entries %d..%d of %s", from, to, cp)
	}
	hashes := tlog.TileHashReader(tlog.Tree{N: cp.Size, Hash: cp.Hash}, tiles{fetch})
	var out [][]byte
	for n := from; n < to; {
		// The bundle holding n, as far as cp's tree reaches.
		t := tlog.Tile{H: TileHeight, L: -1, N: n >> TileHeight}
		t.W = int(min(1<<TileHeight, cp.Size-t.N<<TileHeight))
		bundle, err := fetch(TilePath(t))
		if err != nil {
			return nil, fmt.Errorf("entries from %d: %w", n, err)
		}
		entries, err := SplitBundle(bundle)
		if err != nil {
			return nil, fmt.Errorf("entry bundle %s: %w", TilePath(t), err)
		}
		first := t.N << TileHeight
		if int64(len(entries)) != int64(t.W) {
			return nil, fmt.Errorf("entry bundle %s: %d entries, not %d", TilePath(t), len(entries), t.W)
		}
		for ; n < to && n < first+int64(t.W); n++ {
			e := entries[n-first]
			got, err := hashes.ReadHashes([]int64{tlog.StoredHashIndex(0, n)})
			if err != nil {
				return nil, err
			}
			if got[0] != tlog.RecordHash(e) {
				return nil, fmt.Errorf("entry %d of bundle %s is not what %s commits to", n, TilePath(t), cp)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// ProveFromTiles is the inclusion proof of entry n in cp's tree, read
// from its tiles (checked against cp's root as they are read).
func ProveFromTiles(cp Checkpoint, n int64, fetch FetchTile) (tlog.RecordProof, error) {
	return tlog.ProveRecord(cp.Size, n, tlog.TileHashReader(tlog.Tree{N: cp.Size, Hash: cp.Hash}, tiles{fetch}))
}

// ConsistencyFromTiles proves the tree of older is a prefix of newer's,
// from newer's tiles.
func ConsistencyFromTiles(older, newer Checkpoint, fetch FetchTile) (tlog.TreeProof, error) {
	if older.Size < 1 || older.Size > newer.Size {
		return nil, fmt.Errorf("no proof that %s extends %s", newer, older)
	}
	return tlog.ProveTree(newer.Size, older.Size, tlog.TileHashReader(tlog.Tree{N: newer.Size, Hash: newer.Hash}, tiles{fetch}))
}

// maxAcceptScan bounds how many of a log's newest entries HasAccept reads.
const maxAcceptScan = 1 << 14

// HasAccept says whether cp's log holds an Accept entry among its newest
// entries: the recovery owners took back a state older than one CAS had
// served. CAS appends it after that state's log, which is older than the
// one its clients saw, so a client finds it where the log it remembers is
// not extended. Entries are checked against cp as they are read.
func HasAccept(cp Checkpoint, fetch FetchTile) (bool, error) {
	const chunk = 1 << TileHeight
	for to := cp.Size; to > 0 && cp.Size-to < maxAcceptScan; to -= chunk {
		from := max(0, to-chunk)
		entries, err := Entries(cp, from, to, fetch)
		if err != nil {
			return false, err
		}
		for _, raw := range entries {
			if e, err := ParseEntry(raw); err == nil && e.Type == Accept {
				return true, nil
			}
		}
	}
	return false, nil
}
