package tlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// TileHeight is C2SP tlog-tiles' tile height: 256 hashes or entries a
// tile.
const TileHeight = 8

// MaxTilePath bounds a tile's path: a 64-bit index takes seven elements.
const MaxTilePath = 64

// ErrNoTile: the path names a tile the log does not have (yet).
var ErrNoTile = errors.New("no such tile")

// ParseTilePath reads a C2SP tlog-tiles path: tile/L/N[.p/W] of the
// hashes at level L, or tile/entries/N[.p/W] of an entry bundle.
func ParseTilePath(path string) (tlog.Tile, error) {
	if len(path) > MaxTilePath {
		return tlog.Tile{}, fmt.Errorf("a tile path of %d bytes: at most %d", len(path), MaxTilePath)
	}
	rest, ok := strings.CutPrefix(path, "tile/")
	if !ok || strings.HasPrefix(rest, "data/") {
		return tlog.Tile{}, fmt.Errorf("tile path %q: give tile/LEVEL/N or tile/entries/N", path)
	}
	// golang.org/x/mod's paths name the height and call entries data.
	if bundle, ok := strings.CutPrefix(rest, "entries/"); ok {
		rest = "data/" + bundle
	}
	t, err := tlog.ParseTilePath(fmt.Sprintf("tile/%d/%s", TileHeight, rest))
	if err != nil {
		return tlog.Tile{}, fmt.Errorf("tile path %q: %w", path, err)
	}
	return t, nil
}

// TilePath is the C2SP tlog-tiles path of t.
func TilePath(t tlog.Tile) string {
	p := strings.TrimPrefix(t.Path(), fmt.Sprintf("tile/%d/", TileHeight))
	if d, ok := strings.CutPrefix(p, "data/"); ok {
		p = "entries/" + d
	}
	return "tile/" + p
}

// ReadTile is the tile at path, of the log as it is now: hashes, or the
// entries (each after its length in two bytes, big-endian). A tile the
// log does not hold all of is ErrNoTile.
func ReadTile(tx Reader, path string) ([]byte, error) {
	t, err := ParseTilePath(path)
	if err != nil {
		return nil, err
	}
	size, err := Size(tx)
	if err != nil {
		return nil, err
	}
	first := t.N << TileHeight
	if t.N > (1<<62)>>TileHeight {
		return nil, ErrNoTile
	}
	last := first + int64(t.W) // one past the tile's last item at its level
	if t.L == -1 {
		if last > size {
			return nil, ErrNoTile
		}
		var out []byte
		for i := first; i < last; i++ {
			e, err := ReadEntry(tx, i)
			if err != nil {
				return nil, err
			}
			out = binary.BigEndian.AppendUint16(out, uint16(len(e))) //nolint:gosec // entries are at most MaxEntry bytes
			out = append(out, e...)
		}
		return out, nil
	}
	// Hashes at tree level 8L: item i covers entries up to (i+1) << 8L.
	shift := t.L * TileHeight
	if shift >= 62 || last > size>>shift {
		return nil, ErrNoTile
	}
	return tlog.ReadTileData(t, hashReader{tx})
}

// SplitBundle reads an entry bundle into its entries.
func SplitBundle(data []byte) ([][]byte, error) {
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 2 {
			return nil, errors.New("an entry bundle ends inside a length")
		}
		n := int(binary.BigEndian.Uint16(data))
		if n == 0 || len(data) < 2+n {
			return nil, fmt.Errorf("entry %d of the bundle: %d bytes announced, %d left", len(out), n, len(data)-2)
		}
		out = append(out, data[2:2+n])
		data = data[2+n:]
	}
	return out, nil
}
