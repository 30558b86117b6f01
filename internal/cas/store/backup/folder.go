package backup

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// timeLayout stamps backup file names; they sort by time.
const timeLayout = "20060102T150405Z"

// FileName is where a backup of the CAS NAMESPACE/NAME taken at t goes in
// a folder of backups: NAMESPACE_NAME-TIME.json.
func FileName(cas string, t time.Time) string {
	return prefix(cas) + t.UTC().Format(timeLayout) + ".json"
}

func prefix(cas string) string { return strings.ReplaceAll(cas, "/", "_") + "-" }

// Save writes b into dir (readable by its owner only; written whole or
// not at all) and then removes the oldest backups of the same CAS beyond
// keep. It returns the new file's path.
func Save(dir string, b *Backup, keep int) (string, error) {
	if keep < 1 {
		return "", fmt.Errorf("keep %d: keep at least the backup just taken", keep)
	}
	data, err := json.Marshal(b)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, FileName(b.CAS, b.Taken))
	if err := WriteFile(path, data); err != nil {
		return "", err
	}
	return path, prune(dir, b.CAS, keep)
}

// WriteFile writes a backup file whole or not at all, readable by its
// owner only.
func WriteFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".backup-*")
	if err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing the backup: %w", err)
	}
	return nil
}

// prune removes the oldest of cas's backups in dir beyond keep; other
// files are left alone.
func prune(dir, cas string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing the backups: %w", err)
	}
	p := prefix(cas)
	var ours []string
	for _, e := range entries {
		stamp, ok := strings.CutPrefix(e.Name(), p)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		stamp, ok = strings.CutSuffix(stamp, ".json")
		if _, err := time.Parse(timeLayout, stamp); ok && err == nil {
			ours = append(ours, e.Name())
		}
	}
	slices.Sort(ours)
	for len(ours) > keep {
		if err := os.Remove(filepath.Join(dir, ours[0])); err != nil {
			return fmt.Errorf("removing an old backup: %w", err)
		}
		ours = ours[1:]
	}
	return nil
}

// ReadFile reads and checks the backup in path, reading at most MaxSize.
func ReadFile(path string) (*Backup, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = fh.Close() }()
	data, err := io.ReadAll(io.LimitReader(fh, MaxSize+1))
	if err != nil {
		return nil, err
	}
	b, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
