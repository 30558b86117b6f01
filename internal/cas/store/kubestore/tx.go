package kubestore

import (
	"cmp"
	"errors"
	"maps"
	"slices"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
)

// tx is a transaction over the state in memory: reads see its own writes
// over base; writes become the journal.
type tx struct {
	base     map[string]map[string][]byte
	writes   map[[2]string]*servicesv1beta1.CASStateEntry
	readOnly bool
}

var errReadOnly = errors.New("write in a read-only transaction")

func (t *tx) Get(bucket, key string) ([]byte, error) {
	if w := t.writes[[2]string{bucket, key}]; w != nil {
		if w.Deleted {
			return nil, nil
		}
		return slices.Clone(w.Value), nil
	}
	v, ok := t.base[bucket][key]
	if !ok {
		return nil, nil
	}
	return slices.Clone(v), nil
}

func (t *tx) Put(bucket, key string, value []byte) error {
	if t.readOnly {
		return errReadOnly
	}
	if bucket == "" || key == "" {
		return errors.New("a record needs a bucket and a key")
	}
	t.writes[[2]string{bucket, key}] = &servicesv1beta1.CASStateEntry{Bucket: bucket, Key: key, Value: slices.Clone(value)}
	return nil
}

func (t *tx) Delete(bucket, key string) error {
	if t.readOnly {
		return errReadOnly
	}
	t.writes[[2]string{bucket, key}] = &servicesv1beta1.CASStateEntry{Bucket: bucket, Key: key, Deleted: true}
	return nil
}

// merged is the bucket as the transaction sees it.
func (t *tx) merged(bucket string) map[string][]byte {
	out := maps.Clone(t.base[bucket])
	if out == nil {
		out = map[string][]byte{}
	}
	for k, w := range t.writes {
		if k[0] != bucket {
			continue
		}
		if w.Deleted {
			delete(out, k[1])
		} else {
			out[k[1]] = w.Value
		}
	}
	return out
}

func (t *tx) ForEach(bucket string, fn func(string, []byte) error) error {
	m := t.merged(bucket)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := fn(k, slices.Clone(m[k])); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) Buckets() ([]string, error) {
	names := map[string]bool{}
	for b := range t.base {
		names[b] = true
	}
	for k := range t.writes {
		names[k[0]] = true
	}
	var out []string
	for _, b := range slices.Sorted(maps.Keys(names)) {
		if len(t.merged(b)) > 0 {
			out = append(out, b)
		}
	}
	return out, nil
}

// journal is the transaction's writes, in a stable order.
func (t *tx) journal() []servicesv1beta1.CASStateEntry {
	keys := slices.SortedFunc(maps.Keys(t.writes), func(a, b [2]string) int {
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		return cmp.Compare(a[1], b[1])
	})
	out := make([]servicesv1beta1.CASStateEntry, 0, len(keys))
	for _, k := range keys {
		out = append(out, *t.writes[k])
	}
	return out
}
