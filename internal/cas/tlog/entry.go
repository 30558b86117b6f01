package tlog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
)

// EntryType is what an entry records.
type EntryType string

// What CAS logs.
const (
	// PolicyVersion: a version of a policy was registered.
	PolicyVersion EntryType = "policy"
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
	if e.Type != PolicyVersion {
		return e, fmt.Errorf("log entry: type %q is not one this log writes", e.Type)
	}
	if len(e.Policy) != 2*sha256.Size || e.Version < 1 || e.Digest == "" || e.Record == "" {
		return e, fmt.Errorf("log entry of a policy version: policy (a name's hash), version, digest and record are required")
	}
	return e, nil
}
