package runtimeclass

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
)

// DefaultConfigPath is where containerd reads its configuration unless
// told otherwise.
const DefaultConfigPath = "/etc/containerd/config.toml"

// dropInDir is the folder of drop-ins beside the main configuration.
const dropInDir = "conf.d"

// Installer puts runtime handlers into a node's containerd configuration.
type Installer struct {
	// Root is where the host's filesystem is mounted ("" or "/" on the
	// host itself, e.g. "/host" in the node installer's pod).
	Root string
	// ConfigPath is containerd's configuration on the host.
	ConfigPath string
}

func (in *Installer) hostPath(p string) string { return filepath.Join(in.Root, p) }

func (in *Installer) config() string {
	if in.ConfigPath == "" {
		return DefaultConfigPath
	}
	return in.ConfigPath
}

// DropInPath is the handler's drop-in file on the host.
func (in *Installer) DropInPath(name string) string {
	return filepath.Join(filepath.Dir(in.config()), dropInDir, name+".toml")
}

// Install writes the handler's drop-in and makes the configuration import
// the drop-in folder. Changed says containerd must restart to load it; a
// second Install of the same handler changes nothing.
func (in *Installer) Install(h Handler) (changed bool, err error) {
	cfgPath := in.hostPath(in.config())
	cfg, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("no containerd configuration at %s: write one (containerd config default) or name it", in.config())
	}
	if err != nil {
		return false, err
	}
	version, err := ConfigVersion(cfg)
	if err != nil {
		return false, fmt.Errorf("%s: %w", in.config(), err)
	}
	if h.LikeDefault {
		if h, err = likeDefault(cfg, version, h); err != nil {
			return false, fmt.Errorf("%s: %w", in.config(), err)
		}
	}
	dropIn, err := DropIn(version, h)
	if err != nil {
		return false, err
	}
	glob := filepath.Join(filepath.Dir(in.config()), dropInDir, "*.toml")
	imported, addedImport, err := EnsureImport(cfg, glob)
	if err != nil {
		return false, fmt.Errorf("%s: %w", in.config(), err)
	}
	dropInPath := in.hostPath(in.DropInPath(h.Name))
	if err := os.MkdirAll(filepath.Dir(dropInPath), 0o755); err != nil { //nolint:gosec // containerd's configuration folder
		return false, err
	}
	wroteDropIn, err := atomicfile.WriteIfChanged(dropInPath, dropIn, 0o644)
	if err != nil {
		return false, err
	}
	if addedImport {
		if _, err := atomicfile.WriteIfChanged(cfgPath, imported, 0o644); err != nil {
			return false, err
		}
	}
	return wroteDropIn || addedImport, nil
}

// Uninstall removes the handler's drop-in; the import stays, harmless.
func (in *Installer) Uninstall(name string) (changed bool, err error) {
	err = os.Remove(in.hostPath(in.DropInPath(name)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
