package install

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// PluginName is the kubectl plugin: kubectl finds `kubectl cloister` as
// this executable on PATH. It is the cloister binary under another name.
const PluginName = "kubectl-cloister"

// PluginDir is the last folder on pathList that the user may write to, as
// the operator_controller of the SCONE operator chooses it.
func PluginDir(pathList string) (string, error) {
	dirs := filepath.SplitList(pathList)
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if d == "" {
			continue
		}
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && unix.Access(d, unix.W_OK) == nil {
			return d, nil
		}
	}
	return "", errors.New("no folder on PATH is writable: give the plugin's path")
}

// InstallPlugin copies the executable self to path (replacing what is
// there, atomically) as an executable file.
func InstallPlugin(self, path string) error {
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kubectl-cloister-*")
	if err != nil {
		return fmt.Errorf("writing the kubectl plugin: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, src); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
