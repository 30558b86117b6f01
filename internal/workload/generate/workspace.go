package generate

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// Files of the working folder, as Contrast's users know them.
const (
	ManifestFile         = "manifest.yaml"
	WorkloadOwnerKeyFile = "workload-owner.pem"
	SeedShareOwnerFile   = "seedshare-owner.pem"
	DigestCacheFile      = "image-digests.json"
	ConfigCacheFile      = "image-configs.json"
)

// EnsureKey returns the private key in path, making it (0600) on first
// use; made reports whether it did.
func EnsureKey(path string) (pub string, made bool, err error) {
	k, err := policy.ReadKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		k, err = policy.CreateKeyFile(path)
		made = true
	}
	if err != nil {
		return "", false, err
	}
	return string(policy.MarshalPublicKey(&k.PublicKey)), made, nil
}

// WriteManifest writes the manifest as YAML, only when it changed.
func WriteManifest(path string, doc *policy.Document) error {
	data, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	_, err = atomicfile.WriteIfChanged(path, data, 0o644)
	return err
}

// YAMLFiles expands paths: files as given, folders to their .yaml and
// .yml files (recursively, sorted, so every run sees the same order).
func YAMLFiles(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		slices.Sort(found)
		out = append(out, found...)
	}
	return out, nil
}

// ExposedKey says, for a private key just written to path, the git work
// tree it would be committed in: one inside a work tree that does not
// ignore it is one `git add -A` from a repository. "" when it is outside
// any work tree, ignored there, or git cannot tell.
func ExposedKey(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	tree := ""
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			tree = dir
			break
		}
		if filepath.Dir(dir) == dir {
			return ""
		}
	}
	// check-ignore exits 0 when ignored, 1 when not, 128 on trouble.
	err = exec.Command("git", "-C", tree, "check-ignore", "-q", "--", abs).Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return tree
	}
	return ""
}

// EachYAML calls do with each YAML file of paths (as YAMLFiles expands
// them) and its content, stopping at the first error.
func EachYAML(paths []string, do func(file string, data []byte) error) error {
	files, err := YAMLFiles(paths)
	if err != nil {
		return err
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if err := do(file, data); err != nil {
			return err
		}
	}
	return nil
}
