package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// cdiVersion is the CDI spec version written: 0.5.0 brought deviceNodes'
// hostPath, which every family uses; containerd 1.7 and later read it.
const cdiVersion = "0.5.0"

// cdiClass is the CDI class of Cloister's devices: one CDI device per
// allocated device of a claim.
const cdiClass = "claim"

var cdiName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.:-]*$`)

// cdi writes and removes the CDI specs of claims: one file per claim,
// its devices named after the claim's UID, so a name is never reused and
// a runtime's cached spec never matches another claim.
type cdi struct {
	dir, vendor string
}

func (c cdi) kind() string { return c.vendor + "/" + cdiClass }

func (c cdi) file(claim types.UID) string {
	return filepath.Join(c.dir, c.vendor+"-"+string(claim)+".json")
}

// deviceName is the CDI device of one allocated device of a claim.
func deviceName(claim types.UID, a Allocation) string {
	name := string(claim) + "-" + a.Device
	if a.ShareID != "" {
		name += "-" + a.ShareID
	}
	return name
}

// write replaces the claim's spec with devices (name to edits).
func (c cdi) write(claim types.UID, devices map[string]cdispec.ContainerEdits) error {
	spec := cdispec.Spec{Version: cdiVersion, Kind: c.kind()}
	for name, edits := range devices {
		if !cdiName.MatchString(name) {
			return fmt.Errorf("CDI device name %q: not a valid name", name)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil { //nolint:gosec // the runtime reads CDI specs; they hold no secret
		return err
	}
	return writeAtomic(c.file(claim), raw, 0o644)
}

func (c cdi) remove(claim types.UID) error {
	if err := os.Remove(c.file(claim)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// qualified is the fully qualified CDI device the kubelet hands the runtime.
func (c cdi) qualified(name string) string { return c.kind() + "=" + name }
