package strictjson

import (
	"errors"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	type msg struct {
		A int `json:"a"`
	}
	for _, tc := range []struct {
		in   string
		want string // "" accepts
	}{
		{`{"a": 1}`, ""},
		{" {\"a\": 1}\n", ""},
		{`{"a": 1, "b": 2}`, `unknown field "b"`},
		{`{"a": 1} {}`, "more than one JSON value"},
		{`{"a": 1}}`, "more than one JSON value"},
		{`{"a": 1}]`, "more than one JSON value"},
		{`{"a": 1} x`, "more than one JSON value"},
		{`{"a": `, "unexpected EOF"},
	} {
		var m msg
		err := Unmarshal([]byte(tc.in), &m)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// A reader's own error (a size limit, say) is passed on, not reported as
// a second value.
func TestReaderError(t *testing.T) {
	boom := errors.New("over the limit")
	err := Decode(&failAfter{data: `{"a": 1} `, err: boom}, &struct {
		A int `json:"a"`
	}{})
	if !errors.Is(err, boom) {
		t.Errorf("got %v, want the reader's error", err)
	}
}

type failAfter struct {
	data string
	err  error
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.data == "" {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"a": 1}`, `{"a": 1} {}`, `{"a": 1}]`, `[]`, `{"b": 2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v struct {
			A int `json:"a"`
		}
		if err := Unmarshal(data, &v); err == nil && strings.Count(string(data), "{") == 0 && strings.TrimSpace(string(data)) != "null" {
			t.Errorf("%q decoded into an object", data)
		}
	})
}
