package toolchain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Patch changes one passage of a dependency's file for a tool's build,
// where the module's release lacks a fix or the tool is built without a
// part; the module itself stays as the proxy serves it and its go.sum
// pins it.
type Patch struct {
	// Module is the dependency (as in the tool module's build list), File
	// the file's path in it.
	Module, File string
	// Old must occur exactly once in the file; New replaces it.
	Old, New string
	// Why says what the release lacks, or why the tool is built without
	// the passage.
	Why string
}

// deletions are the patches that remove each passage (each must occur
// once) from a dependency's file: a part of a tool the build leaves out.
func deletions(module, file, why string, passages ...string) []Patch {
	ps := make([]Patch, len(passages))
	for i, old := range passages {
		ps[i] = Patch{Module: module, File: file, Old: old, Why: why}
	}
	return ps
}

// id identifies the patch in the sources stamp: a changed patch rebuilds.
func (p Patch) id() string {
	h := sha256.Sum256([]byte(p.Module + "\x00" + p.File + "\x00" + p.Old + "\x00" + p.New))
	return hex.EncodeToString(h[:8])
}

// workspace copies each patched module into dir, applies its patches
// there, and writes a go.work that uses the tool module with those
// copies in place of the modules (the go command takes no overlay of
// the module cache); it returns the go.work's path, "" without patches.
func workspace(ctx context.Context, goBin, modDir string, env []string, patches []Patch, dir string) (string, error) {
	if len(patches) == 0 {
		return "", nil
	}
	goMod, err := os.ReadFile(filepath.Join(modDir, "go.mod"))
	if err != nil {
		return "", err
	}
	// The workspace takes the module's go version and its godebug
	// settings, which a workspace reads from go.work only.
	var goVersion, godebug string
	for _, line := range strings.Split(string(goMod), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "go "); ok {
			goVersion = strings.TrimSpace(v)
		}
		if strings.HasPrefix(line, "godebug ") {
			godebug += line + "\n"
		}
	}
	work := "go " + goVersion + "\n\n" + godebug + "use " + strconv.Quote(modDir) + "\n"
	copies := map[string]string{}
	for _, p := range patches {
		cp, ok := copies[p.Module]
		if !ok {
			src, err := moduleDir(ctx, goBin, modDir, env, p.Module)
			if err != nil {
				return "", fmt.Errorf("patching %s: %w", p.Module, err)
			}
			cp = filepath.Join(dir, "patched", strings.ReplaceAll(p.Module, "/", "_"))
			if err := os.CopyFS(cp, os.DirFS(src)); err != nil {
				return "", fmt.Errorf("patching %s: copying it: %w", p.Module, err)
			}
			copies[p.Module] = cp
			work += "replace " + p.Module + " => " + strconv.Quote(cp) + "\n"
		}
		file := filepath.Join(cp, filepath.FromSlash(p.File))
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("patching %s: %w", p.Module, err)
		}
		if n := strings.Count(string(data), p.Old); n != 1 {
			return "", fmt.Errorf("patching %s %s: the passage occurs %d times, want once: the pin moved; check whether the patch (%s) is still needed", p.Module, p.File, n, p.Why)
		}
		if err := os.Chmod(file, 0o600); err != nil {
			return "", err
		}
		if err := os.WriteFile(file, []byte(strings.Replace(string(data), p.Old, p.New, 1)), 0o600); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, "go.work")
	return path, os.WriteFile(path, []byte(work), 0o600)
}

// moduleDir is the folder of module (at the version modDir's build list
// has), downloaded first if the module cache lacks it: go list -m names
// no folder for a module not downloaded yet, as on a fresh machine.
func moduleDir(ctx context.Context, goBin, modDir string, env []string, module string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", module)
	cmd.Dir, cmd.Env = modDir, env
	out, err := cmd.Output()
	var got struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &got); jerr != nil && err == nil {
		err = jerr
	}
	switch {
	case got.Error != "":
		return "", fmt.Errorf("downloading it: %s", got.Error)
	case err != nil:
		return "", fmt.Errorf("downloading it: %w", err)
	case got.Dir == "":
		return "", errors.New("downloading it: go mod download named no folder")
	}
	return got.Dir, nil
}
