package collateral

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/attesttest"
)

// FuzzDecodeEntry feeds cache files (which a node's root may have
// written) to the loader: an entry or an error, never a panic; an entry
// always has its key and value.
func FuzzDecodeEntry(f *testing.F) {
	f.Add([]byte(`{"key":"intel/sgx/00606a000000/platform","value":{"TCBInfo":"e30="},"fetched":"2026-01-01T00:00:00Z","nextUpdate":"2026-02-01T00:00:00Z","tried":"2026-01-01T00:00:00Z","failures":0}`))
	f.Add([]byte(`{"key":"amd/crl/Milan/vcek","value":"AAEC","extra":1}`))
	f.Add([]byte(`{"key":"k","value":1}{}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		attesttest.CountExec()
		e, err := decodeEntry(raw)
		if err == nil && (e.Key == "" || len(e.Value) == 0) {
			t.Fatalf("an entry without its key or value: %+v", e)
		}
	})
}

// FuzzParseAPIKey: only 32 hex digits pass, and an error never shows
// what it was given.
func FuzzParseAPIKey(f *testing.F) {
	f.Add([]byte("00112233445566778899aabbccddeeff\n"))
	f.Add([]byte(strings.Repeat("0", 32)))
	f.Add([]byte("not a key"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		attesttest.CountExec()
		key, err := ParseAPIKey(raw)
		if err != nil {
			// The one error there is says the length, nothing of the key.
			if want := fmt.Sprintf(keyError, len(strings.TrimSpace(string(raw)))); err.Error() != want {
				t.Fatalf("error %q, want %q", err, want)
			}
			return
		}
		if key != "" && !keyPattern.MatchString(key) {
			t.Fatalf("accepted %q", key)
		}
	})
}
