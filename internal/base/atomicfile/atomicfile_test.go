package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWriteIfChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if wrote, err := WriteIfChanged(path, []byte("a"), 0o600); err != nil || !wrote {
		t.Fatalf("new file: %v %v", wrote, err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if wrote, err := WriteIfChanged(path, []byte("a"), 0o644); err != nil || wrote {
		t.Errorf("same content: %v %v", wrote, err)
	}
	if info, _ := os.Stat(path); !info.ModTime().Equal(old) {
		t.Error("same content touched the file")
	}
	if wrote, err := WriteIfChanged(path, []byte("b"), 0o644); err != nil || !wrote {
		t.Errorf("new content: %v %v", wrote, err)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, the file had 0600", info.Mode().Perm())
	}
	if data, _ := os.ReadFile(path); string(data) != "b" {
		t.Errorf("content %q", data)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Error("the temporary file stayed")
	}
}
