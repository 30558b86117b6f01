package store

import (
	"crypto/sha3"
	"encoding/binary"
)

// setHash is a digest of a set of records that a change updates in time
// proportional to the change, not to the state: LtHash with 1024 lanes of
// 16 bits (Lewi, Kim, Maykov and Weis, "Securing Update Propagation with
// Homomorphic Hashing", 2019), whose lanes add and subtract elements
// expanded by SHAKE128. Finding two sets with the same digest is as hard
// as a lattice problem the paper puts beyond 200 bits, so a set cut from
// two points in time, or with one older record, does not match.
type setHash [setHashSize]byte

const setHashSize = 2048

// element expands one record (its bucket, key and stored bytes) to the
// lanes it adds to a set.
func element(bucket, key string, stored []byte) *setHash {
	x := sha3.NewSHAKE128()
	_, _ = x.Write([]byte("cloister-cas-state-record-v1"))
	for _, part := range [][]byte{[]byte(bucket), []byte(key), stored} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		_, _ = x.Write(n[:])
		_, _ = x.Write(part)
	}
	var e setHash
	_, _ = x.Read(e[:])
	return &e
}

func (h *setHash) add(e *setHash) {
	for i := 0; i < setHashSize; i += 2 {
		binary.LittleEndian.PutUint16(h[i:], binary.LittleEndian.Uint16(h[i:])+binary.LittleEndian.Uint16(e[i:]))
	}
}

func (h *setHash) sub(e *setHash) {
	for i := 0; i < setHashSize; i += 2 {
		binary.LittleEndian.PutUint16(h[i:], binary.LittleEndian.Uint16(h[i:])-binary.LittleEndian.Uint16(e[i:]))
	}
}
