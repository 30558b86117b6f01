package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	"github.com/cloister-cc/cloister/internal/attest/sigstruct"
	"github.com/cloister-cc/cloister/internal/workload/imagepin"
)

// maxArtifact bounds a guest artifact read whole: firmware is megabytes,
// a kernel or initrd tens of them.
const maxArtifact = 512 << 20

func newReferenceValues(s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "reference-values", Short: "Reference values: what the hardware measures at a confidential VM's or an enclave's launch"}
	cmd.AddCommand(newReferenceValuesCompute(s))
	return cmd
}

type refCompute struct {
	platform, firmware, kernel, initrd, cmdline, vcpuType string
	sigstruct, image                                      string
	guestPolicy, minTCB                                   string
	vcpus                                                 int
	rtmr                                                  []string
}

func newReferenceValuesCompute(s Streams) *cobra.Command {
	o := &refCompute{}
	cmd := &cobra.Command{
		Use:   "compute --platform snp|tdx --firmware FILE [flags] | --platform sgx --sigstruct FILE",
		Short: "Compute reference values from the guest's or the enclave's artifacts",
		Long: "Computes what the hardware will measure when the guest launches, and writes a reference\n" +
			"values file (" + refvalues.Version + ") that generate --reference-values takes:\n" +
			"snp: the launch measurement of QEMU's SEV-SNP guest from its firmware (OVMF), the kernel,\n" +
			"initrd and command line it measures by hash, the vCPUs and their type; tdx: the TD's MRTD\n" +
			"from its firmware (TDVF), and RTMRs as given; sgx: the enclave's identity (mrenclave, mrsigner,\n" +
			"isvProdID, isvSVN, attributes and their mask) from its SIGSTRUCT (Gramine's .sig), whose\n" +
			"signature is checked; a debug enclave is refused. The identity is printed as a CAS policy\n" +
			"identity too. Each artifact's SHA-256 is written beside them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), s) },
	}
	f := cmd.Flags()
	f.StringVar(&o.platform, "platform", "", "snp, tdx or sgx")
	f.StringVar(&o.sigstruct, "sigstruct", "", "sgx: the enclave's SIGSTRUCT (Gramine's .sig file, 1808 bytes); with --image, its path in the image")
	f.StringVar(&o.image, "image", "", "sgx: read --sigstruct from this image, named by digest (REPOSITORY@sha256:...)")
	f.StringVar(&o.firmware, "firmware", "", "the guest firmware: OVMF (snp) or TDVF (tdx)")
	f.StringVar(&o.kernel, "kernel", "", "snp: the kernel the firmware measures (measured direct boot)")
	f.StringVar(&o.initrd, "initrd", "", "snp: the initrd")
	f.StringVar(&o.cmdline, "cmdline", "", "snp: the kernel command line")
	f.IntVar(&o.vcpus, "vcpus", 1, "snp: the guest's vCPUs (Kata's default_vcpus)")
	f.StringVar(&o.vcpuType, "vcpu-type", "EPYC-v4", "snp: QEMU's vCPU model: "+strings.Join(refvalues.VCPUTypes(), ", "))
	f.StringVar(&o.guestPolicy, "guest-policy", "0x30000", "snp: the guest policy the guest must run under (hex; 0x30000: SMT allowed, no debug)")
	f.StringVar(&o.minTCB, "min-tcb", "", "snp: the lowest TCB accepted, bootloader,tee,snp,microcode (e.g. 3,0,8,115)")
	f.StringSliceVar(&o.rtmr, "rtmr", nil, "tdx: the RTMRs to pin, hex by index (empty: any), as the guest's event log gives them")
	return cmd
}

func readArtifact(flag, path string) ([]byte, error) { return readBounded(flag, path, maxArtifact) }

// readBounded reads at most limit bytes of path, refusing a larger file.
func readBounded(flag, path string, limit int) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	defer func() { _ = f.Close() }()
	// One bounded read: the size is what was read, not what a stat said.
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("--%s %s: more than %d bytes", flag, path, limit)
	}
	return data, nil
}

func (o *refCompute) run(ctx context.Context, s Streams) error {
	if o.platform == "sgx" {
		return o.runSGX(ctx, s)
	}
	fw, err := readArtifact("firmware", o.firmware)
	if err != nil {
		return err
	}
	if fw == nil {
		return errors.New("--firmware: required: the guest's firmware image")
	}
	var file *refvalues.File
	switch o.platform {
	case "snp":
		in := refvalues.SNPInput{Firmware: fw, Cmdline: o.cmdline, VCPUs: o.vcpus, VCPUType: o.vcpuType}
		if in.Kernel, err = readArtifact("kernel", o.kernel); err != nil {
			return err
		}
		if in.Initrd, err = readArtifact("initrd", o.initrd); err != nil {
			return err
		}
		policy, err := strconv.ParseUint(strings.TrimPrefix(o.guestPolicy, "0x"), 16, 64)
		if err != nil {
			return fmt.Errorf("--guest-policy %q: not hex", o.guestPolicy)
		}
		minTCB, err := parseMinTCB(o.minTCB)
		if err != nil {
			return err
		}
		if file, err = refvalues.ComputeSNP(in, policy, minTCB); err != nil {
			return err
		}
	case "tdx":
		var rtmr []attest.Bytes
		for i, r := range o.rtmr {
			var b attest.Bytes
			if err := b.UnmarshalText([]byte(r)); err != nil {
				return fmt.Errorf("--rtmr %d: %w", i, err)
			}
			rtmr = append(rtmr, b)
		}
		if file, err = refvalues.ComputeTDX(fw, rtmr); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--platform %q: use snp, tdx or sgx", o.platform)
	}
	out, err := file.Marshal()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.Out, "%s\n", out)
	return err
}

func parseMinTCB(s string) (*attest.SNPTCB, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return nil, fmt.Errorf("--min-tcb %q: want bootloader,tee,snp,microcode", s)
	}
	var v [4]uint8
	for i, p := range parts {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 8)
		if err != nil {
			return nil, fmt.Errorf("--min-tcb %q: %q is not 0-255", s, p)
		}
		v[i] = uint8(n)
	}
	return &attest.SNPTCB{Bootloader: v[0], TEE: v[1], SNP: v[2], Microcode: v[3]}, nil
}

// runSGX reads and checks a SIGSTRUCT, and prints its reference values
// and the CAS policy identity they pin.
func (o *refCompute) runSGX(ctx context.Context, s Streams) error {
	if o.firmware != "" || o.kernel != "" || o.initrd != "" {
		return errors.New("--platform sgx: an enclave has no firmware, kernel or initrd: give --sigstruct")
	}
	if o.sigstruct == "" {
		return errors.New("--sigstruct: required: the enclave's SIGSTRUCT (Gramine's .sig), a file or, with --image, its path in the image")
	}
	var raw []byte
	var err error
	if o.image != "" {
		raw, err = imagepin.File(ctx, o.image, o.sigstruct, sigstruct.Size)
		if err != nil {
			return fmt.Errorf("--image: %w", err)
		}
	} else if raw, err = readBounded("sigstruct", o.sigstruct, sigstruct.Size); err != nil {
		return err
	}
	file, err := refvalues.ComputeSGX(raw)
	if err != nil {
		return fmt.Errorf("--sigstruct %s: %w", o.sigstruct, err)
	}
	file.Source.Image, file.Source.Path = o.image, o.sigstruct
	return printSGX(s, file)
}

// printSGX writes the values, then the identity as a CAS policy takes it,
// as comments, so the output stays one reference values file.
func printSGX(s Streams, file *refvalues.File) error {
	out, err := file.Marshal()
	if err != nil {
		return err
	}
	id, err := yaml.Marshal(map[string]any{"identities": []attest.Identity{file.SGX.Identity()}})
	if err != nil {
		return err
	}
	var b strings.Builder
	b.Write(out)
	b.WriteString("\n# The CAS policy identity these values pin:\n")
	for _, line := range strings.Split(strings.TrimSpace(string(id)), "\n") {
		b.WriteString("#   " + line + "\n")
	}
	_, err = io.WriteString(s.Out, b.String())
	return err
}
