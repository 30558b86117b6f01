package build

import (
	"archive/tar"
	"bytes"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cloister-cc/cloister/internal/enclave/eif"
)

// EIFPath is where the enclave pods' image carries the enclave image
// file, which their supervisor boots.
const EIFPath = "/enclave/enclave.eif"

// PodLabels name the PCRs of the enclave image file an enclave pod image
// carries (informational: the supervisor measures the file itself).
var PodLabels = [3]string{"dev.cloister.enclave.pcr0", "dev.cloister.enclave.pcr1", "dev.cloister.enclave.pcr2"}

// PodImage is base (cloister-enclave's image) with the enclave image file
// added at EIFPath, readable by the supervisor's non-root user, at time
// zero: the image a NitroEnclaveDeployment's spec.image names.
func PodImage(base v1.Image, file []byte, pcrs eif.PCRs) (v1.Image, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	epoch := time.Unix(0, 0).UTC()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "enclave/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: EIFPath[1:], Mode: 0o644, Size: int64(len(file)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(file); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := b.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "cloister enclave build", Comment: "the enclave image file"}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	p0, p1, p2 := pcrs.Hex()
	for i, v := range []string{p0, p1, p2} {
		cfg.Config.Labels[PodLabels[i]] = v
	}
	return mutate.ConfigFile(img, cfg)
}
