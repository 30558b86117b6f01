// Package atomicfile writes files that readers never see half-written
// (a temporary file renamed over the old one) and leaves a file that
// already holds the content alone, modification time included.
package atomicfile

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
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

// WriteSynced writes data to path as WriteIfChanged does and, before it
// returns, makes the file and its rename durable (fsync of the file and
// of its folder): for a state a crash must not take back once answered.
func WriteSynced(path string, data []byte, mode fs.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer func() { _ = dir.Close() }()
	return dir.Sync()
}
