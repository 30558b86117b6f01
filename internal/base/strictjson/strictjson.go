// Package strictjson decodes JSON that crosses a trust boundary the one
// way every Cloister edge does: unknown fields are refused, and so is
// anything after the value, so a typo or a smuggled second value is an
// error rather than silently ignored.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// ErrTrailing: something follows the JSON value.
var ErrTrailing = errors.New("more than one JSON value")

// Decode reads one JSON value from r into v.
func Decode(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Nothing may follow the value: not another value, nor a stray '}' or
	// ']' (which dec.More does not count).
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil && !isSyntax(err) {
			return err // the reader failed, e.g. over its size limit
		}
		return ErrTrailing
	}
	return nil
}

// Unmarshal is Decode of data.
func Unmarshal(data []byte, v any) error { return Decode(bytes.NewReader(data), v) }

func isSyntax(err error) bool {
	var syn *json.SyntaxError
	return errors.As(err, &syn)
}
