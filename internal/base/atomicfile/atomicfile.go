// Package atomicfile writes files that readers never see half-written
// (a temporary file renamed over the old one) and leaves a file that
// already holds the content alone, modification time included.
package atomicfile

import (
	"bytes"
	"io/fs"
	"os"
)

// WriteIfChanged writes data to path unless it already holds it, and
// says whether it wrote. An existing file keeps its mode; a new one gets
// mode.
func WriteIfChanged(path string, data []byte, mode fs.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil {
		if bytes.Equal(old, data) {
			return false, nil
		}
		if info, err := os.Stat(path); err == nil {
			mode = info.Mode().Perm()
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	return true, nil
}
