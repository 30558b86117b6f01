package tlog

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
)

// EntryType is what an entry records.
type EntryType string

// What CAS logs.
const (
	// PolicyVersion: a version of a policy was registered.
	PolicyVersion EntryType = "policy"
	// Init: CAS was initialised; Digest is of its recovery owners, their
	// threshold and its first board (InitDigest).
	Init EntryType = "init"
	// Board: the board changed to its Version; Digest is of its keys and
	// threshold as stored.
	Board EntryType = "board"
	// Accept: the recovery owners accepted a state older than one CAS
	// served (a backup restored, a rollback they took back); Version is
	// the generation they accepted, Digest of it and the generation it
	// moved to.
	Accept EntryType = "accept"
	// Identity: a replica of CAS runs as another identity than the one
	// logged last (a new image, measurement or pod policy); Digest is of
	// what its evidence shows.
	Identity EntryType = "identity"
)

// Entry is one record of the log: JSON, fields in a fixed order, so the
// same event is the same bytes. The log is read by anyone, and CAS shows
// a policy only to who may read it, so an entry names a policy by the
// hash of its name (NameHash) and its document by its digest: whoever
// knows the policy finds it; nobody else learns more than that a version
// was registered.
type Entry struct {
	Type EntryType `json:"type"`
	// Policy is NameHash of the policy's name; Version, Digest and
	// Predecessor are its version's, as its history has them.
	Policy      string `json:"policy,omitempty"`
	Version     int    `json:"version,omitempty"`
	Digest      string `json:"digest,omitempty"`
	Predecessor string `json:"predecessor,omitempty"`
	// Record is the hash of the history record CAS signed for it, which
	// names the signers.
	Record string `json:"record,omitempty"`
}

// NameHash is how an entry names a policy: hex SHA-256 of its name.
func NameHash(name string) string {
	h := sha256.Sum256([]byte(name))
	return hex.EncodeToString(h[:])
}

// Marshal is the entry's bytes in the log.
func (e Entry) Marshal() ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxEntry {
		return nil, fmt.Errorf("a log entry of %d bytes: at most %d", len(b), MaxEntry)
	}
	return b, nil
}

// ParseEntry reads an entry strictly (unknown fields refused).
func ParseEntry(data []byte) (Entry, error) {
	var e Entry
	if len(data) > MaxEntry {
		return e, fmt.Errorf("a log entry of %d bytes: at most %d", len(data), MaxEntry)
	}
	if err := strictjson.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("log entry: %w", err)
	}
	switch e.Type {
	case PolicyVersion:
		if len(e.Policy) != 2*sha256.Size || e.Version < 1 || e.Digest == "" || e.Record == "" {
			return e, errors.New("log entry of a policy version: policy (a name's hash), version, digest and record are required")
		}
	case Init, Board, Accept, Identity:
		versioned := e.Type == Board || e.Type == Accept
		if len(e.Digest) != 2*sha256.Size || e.Policy != "" || e.Predecessor != "" || e.Record != "" || versioned != (e.Version >= 1) {
			return e, fmt.Errorf("log entry of a CAS %s: a digest (and for a board or an acceptance a version) only", e.Type)
		}
	default:
		return e, fmt.Errorf("log entry: type %q is not one this log writes", e.Type)
	}
	return e, nil
}

// Digest is how an init or board entry names what it records: hex
// SHA-256 over the parts, each prefixed by its length.
func Digest(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}
