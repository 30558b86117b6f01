package dra

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// Claim names a ResourceClaim.
type Claim struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
}

func (c Claim) String() string { return c.Namespace + "/" + c.Name }

// Allocation is one device of a claim's allocation result, as the
// driver keeps it.
type Allocation struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
	// ShareID tells apart the allocations of a device that allows many.
	ShareID string `json:"shareID,omitempty"`
	// Consumed is the capacity the allocation takes of the device, in
	// its units (bytes of EPC, CPUs).
	Consumed map[string]int64 `json:"consumed,omitempty"`
}

// Prepared is one device the driver prepared for a claim.
type Prepared struct {
	Claim Claim `json:"claim"`
	Allocation
	// CDIDevice is the fully qualified CDI device the kubelet was given.
	CDIDevice string            `json:"cdiDevice"`
	Data      map[string]string `json:"data,omitempty"`
}

// checkpointVersion changes when the file's meaning does.
const checkpointVersion = 1

// maxCheckpoint bounds the file read back: far beyond any node's claims.
const maxCheckpoint = 16 << 20

// checkpoint is what the driver prepared, kept in its plugin folder so
// that a restarted driver unprepares its predecessor's claims and keeps
// counting what they hold.
type checkpoint struct {
	Version  int                      `json:"version"`
	Prepared map[types.UID][]Prepared `json:"prepared"`
}

func readCheckpoint(path string) (*checkpoint, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &checkpoint{Version: checkpointVersion, Prepared: map[types.UID][]Prepared{}}, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, maxCheckpoint+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(raw) > maxCheckpoint {
		return nil, fmt.Errorf("%s is over %d bytes: not the driver's checkpoint", path, maxCheckpoint)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	c := &checkpoint{}
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("%s: %w (move it aside to start without the prepared claims it lists)", path, err)
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("%s: version %d, this driver reads %d", path, c.Version, checkpointVersion)
	}
	if c.Prepared == nil {
		c.Prepared = map[types.UID][]Prepared{}
	}
	return c, nil
}

// write replaces the file atomically, so a crash leaves the old or the
// new one.
func (c *checkpoint) write(path string) error {
	raw, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return writeAtomic(path, raw, 0o600)
}

// held is every prepared device but those of claim.
func (c *checkpoint) held(except types.UID) []Prepared {
	var out []Prepared
	for uid, ps := range c.Prepared {
		if uid != except {
			out = append(out, ps...)
		}
	}
	return out
}

func writeAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
