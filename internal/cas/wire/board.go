package wire

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// BoardChange is POST /v1/board: the board's next keys and threshold,
// signed by the current board's threshold of its keys, and at least a
// majority.
type BoardChange struct {
	// Version is the board's next version (the current one plus one),
	// so a change once signed cannot be replayed later.
	Version int `json:"version"`
	// Keys are the new board's P-256 public keys (PEM).
	Keys []string `json:"keys"`
	// Threshold is how many of Keys approve a new name or a wildcard;
	// 0: a majority of them.
	Threshold  int                `json:"threshold,omitempty"`
	Signatures []policy.Signature `json:"signatures"`
}

// Board is POST /v1/board's answer: the board now.
type Board struct {
	Board     []string `json:"board"` // fingerprints
	Threshold int      `json:"threshold"`
	Version   int      `json:"version"`
}

// BoardThreshold is the threshold a board of keys keys takes when given
// threshold: as given, or with 0 a majority.
func BoardThreshold(threshold, keys int) int {
	if threshold == 0 {
		return keys/2 + 1
	}
	return threshold
}

// MaxBoard bounds a board's keys: as many as a policy's owners, and more
// than any set of recovery owners in practice (the default board).
const MaxBoard = 64

// BoardDigest is what a board member signs to change the board: the
// change (its version, the new keys' fingerprints, sorted, and their
// threshold) bound to one CAS by its encryption key, so a change signed
// for one CAS is nothing to another with the same board.
func BoardDigest(casEncryptionKey string, version, threshold int, fingerprints []string) []byte {
	fps := slices.Sorted(slices.Values(fingerprints))
	b, _ := json.Marshal(struct {
		Kind      string   `json:"kind"`
		CAS       string   `json:"cas"`
		Version   string   `json:"version"`
		Threshold string   `json:"threshold"`
		Board     []string `json:"board"`
	}{"cloister.dev/board-change/v2", casEncryptionKey, strconv.Itoa(version), strconv.Itoa(threshold), fps})
	h := sha256.Sum256(b)
	return h[:]
}
