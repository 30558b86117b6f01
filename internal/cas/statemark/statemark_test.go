package statemark

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A mark that is not whole, carries an unknown field or is too big is
// refused.
func TestParseRefuses(t *testing.T) {
	for _, raw := range []string{`{"generation":1}`, `{"generation":1,"owners":["a"],"threshold":1,"check":"AA==","mac":"AA==","x":1}`, strings.Repeat(" ", MaxSize+1)} {
		if _, err := Parse([]byte(raw)); err == nil {
			t.Errorf("%.60s parsed", raw)
		}
	}
}

// Whatever a volume holds, a mark that parses is one a replica could
// have written in form (its check, MAC and threshold sizes), and it
// verifies under no key but the one that made it.
func FuzzParse(f *testing.F) {
	good := &Mark{Generation: 7, Owners: []string{"sha256:" + strings.Repeat("ab", 32)}, Threshold: 1, Check: bytes.Repeat([]byte{1}, CheckSize)}
	key := bytes.Repeat([]byte{2}, 32)
	good.MAC = good.Sum(key)
	raw, _ := json.Marshal(good)
	f.Add(raw)
	f.Add([]byte(`{"generation":1,"owners":[],"threshold":0,"check":"","mac":""}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := Parse(raw)
		if err != nil {
			return
		}
		if len(m.Check) != CheckSize || len(m.MAC) != 32 || m.Threshold < 1 || m.Threshold > len(m.Owners) {
			t.Fatalf("%q parsed as %+v", raw, m)
		}
		if m.Verify(bytes.Repeat([]byte{3}, 32)) {
			t.Fatalf("%q verifies under a key that made no mark", raw)
		}
		if m.Verify(key) && (m.Generation != good.Generation || !bytes.Equal(m.Check, good.Check)) {
			t.Fatalf("%q verifies with other content than its MAC covers: %+v", raw, m)
		}
	})
}
