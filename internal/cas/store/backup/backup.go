// Package backup owns the format of a CAS backup: CAS's state exported as
// stored, every value sealed under a key only the root seed opens (or, in
// the slots of the sealed bucket, under a node's key), with the integrity
// record that binds the records together. A backup therefore needs no
// protection of its own to stay confidential: only a CAS that holds the
// seed, which the recovery owners' shares give it, reads one; and a
// record changed, dropped or added in it is refused at unlock.
package backup

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
	"github.com/cloister-cc/cloister/internal/cas/store/records"
)

// Format names this version of the format.
const Format = "cloister.dev/cas-backup/v1"

// Limits of a backup as read: a state is a few thousand records.
const (
	MaxSize    = 256 << 20
	maxRecords = 1 << 20
	// The CASStateRecord schema's limits, so that a restore is never
	// refused by the API server half-way.
	maxBucket = 64
	maxKey    = 1024
	maxValue  = 1 << 20
)

// Backup is one export of a CAS's state.
type Backup struct {
	Format string `json:"format"`
	// CAS is NAMESPACE/NAME of the CAS the state was exported from.
	CAS string `json:"cas"`
	// Taken is when the state was read.
	Taken   time.Time `json:"taken"`
	Records []Record  `json:"records"`
}

// Record is one record as stored.
type Record struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	Value  []byte `json:"value"`
}

// Export reads every record of s in one consistent view.
func Export(s records.Store, cas string, taken time.Time) (*Backup, error) {
	b := &Backup{Format: Format, CAS: cas, Taken: taken.UTC()}
	err := s.View(func(tx records.Tx) error {
		buckets, err := tx.Buckets()
		if err != nil {
			return err
		}
		for _, bucket := range buckets {
			err := tx.ForEach(bucket, func(k string, v []byte) error {
				b.Records = append(b.Records, Record{Bucket: bucket, Key: k, Value: append([]byte(nil), v...)})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading CAS %s's state: %w", cas, err)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// Parse reads a backup strictly: unknown fields, trailing data and a
// backup that fails Validate are refused.
func Parse(data []byte) (*Backup, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("a backup of %d bytes is more than the %d a CAS state comes to", len(data), MaxSize)
	}
	b := &Backup{}
	if err := strictjson.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("reading the backup: %w", err)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// ErrEmpty is a state with nothing in it: a CAS not initialised.
var ErrEmpty = errors.New("the state is empty: CAS was never initialised, or its state was deleted")

// Validate checks what can be checked without the seed: the format, the
// CAS's name, record names within the API's limits, no record twice, and
// the integrity record, without which no CAS would unlock the state.
func (b *Backup) Validate() error {
	if b.Format != Format {
		return fmt.Errorf("format %q: this version of Cloister reads %s", b.Format, Format)
	}
	if ns, name, ok := strings.Cut(b.CAS, "/"); !ok || ns == "" || name == "" {
		return fmt.Errorf("cas %q: want the NAMESPACE/NAME of the CAS it was taken from", b.CAS)
	}
	if len(b.Records) == 0 {
		return fmt.Errorf("CAS %s: %w", b.CAS, ErrEmpty)
	}
	if len(b.Records) > maxRecords {
		return fmt.Errorf("records: %d, more than %d", len(b.Records), maxRecords)
	}
	seen := make(map[[2]string]bool, len(b.Records))
	integrity := false
	for i, r := range b.Records {
		switch {
		case r.Bucket == "" || len(r.Bucket) > maxBucket:
			return fmt.Errorf("records[%d].bucket: want 1 to %d bytes", i, maxBucket)
		case r.Key == "" || len(r.Key) > maxKey:
			return fmt.Errorf("records[%d].key: want 1 to %d bytes", i, maxKey)
		case len(r.Value) > maxValue:
			return fmt.Errorf("records[%d].value: %d bytes, more than %d", i, len(r.Value), maxValue)
		case seen[[2]string{r.Bucket, r.Key}]:
			return fmt.Errorf("records[%d]: %s/%s is in the backup twice", i, r.Bucket, r.Key)
		}
		seen[[2]string{r.Bucket, r.Key}] = true
		integrity = integrity || records.IsIntegrity(r.Bucket, r.Key)
	}
	if !integrity {
		return errors.New("records: no integrity record, so no CAS would unlock this state: it is not a whole CAS state")
	}
	return nil
}
