package dra

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The checkpoint read back after a crash or by a new driver version: any
// bytes give an error or a checkpoint that writes and reads back the same.
func FuzzCheckpoint(f *testing.F) {
	f.Add([]byte(`{"version":1,"prepared":{"u1":[{"claim":{"uid":"u1","namespace":"ns","name":"c"},"request":"r","pool":"n","device":"d","consumed":{"epc":1024},"cdiDevice":"sgx.cloister.dev/claim=u1-d","data":{"node":"zcrypt_apqn_5_18"}}]}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"prepared":null,"extra":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		path := filepath.Join(t.TempDir(), "checkpoint.json")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := readCheckpoint(path)
		if err != nil {
			return
		}
		if err := c.write(path); err != nil {
			t.Fatal(err)
		}
		again, err := readCheckpoint(path)
		if err != nil || !reflect.DeepEqual(c, again) {
			t.Fatalf("a checkpoint read back differs: %v\n%+v\n%+v", err, c, again)
		}
	})
}
