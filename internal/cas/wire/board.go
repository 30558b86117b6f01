package wire

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// BoardChange is POST /v1/board: the board's next keys, signed by a
// majority of its current keys.
type BoardChange struct {
	// Version is the board's next version (the current one plus one),
	// so a change once signed cannot be replayed later.
	Version int `json:"version"`
	// Keys are the new board's P-256 public keys (PEM).
	Keys       []string           `json:"keys"`
	Signatures []policy.Signature `json:"signatures"`
}

// Board is POST /v1/board's answer: the board now.
type Board struct {
	Board   []string `json:"board"` // fingerprints
	Version int      `json:"version"`
}

// MaxBoard bounds a board's keys: as many as a policy's owners, and more
// than any set of recovery owners in practice (the default board).
const MaxBoard = 64

// BoardDigest is what a board member signs to change the board: the
// change (its version and the new keys' fingerprints, sorted) bound to
// one CAS by its encryption key, so a change signed for one CAS is
// nothing to another with the same board.
func BoardDigest(casEncryptionKey string, version int, fingerprints []string) []byte {
	fps := slices.Sorted(slices.Values(fingerprints))
	b, _ := json.Marshal(struct {
		Kind    string   `json:"kind"`
		CAS     string   `json:"cas"`
		Version string   `json:"version"`
		Board   []string `json:"board"`
	}{"cloister.dev/board-change/v1", casEncryptionKey, strconv.Itoa(version), fps})
	h := sha256.Sum256(b)
	return h[:]
}
