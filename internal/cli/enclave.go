package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/enclave/build"
	"github.com/cloister-cc/cloister/internal/enclave/eif"
)

// Bounds of what enclave build and describe read whole.
const (
	maxResource = 1 << 20
	maxBootFile = 256 << 20
	maxEIF      = 8 << 30
)

func newEnclave(s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "enclave", Short: "Nitro Enclave images: build one from a NitroEnclaveDeployment, describe one; sign its manifest"}
	cmd.AddCommand(newEnclaveBuild(s), newEnclaveDescribe(s), newEnclaveSign(s))
	return cmd
}

// EnclaveImage is cloister-enclave's image, the base of the enclave pods'
// image enclave build --push makes, pinned like InitializerImage.
var EnclaveImage string

type enclaveBuild struct {
	file, kernel, init, nsm, orchestrator, cmdline, arch, output string
	push, base                                                   string
	update                                                       bool
}

func newEnclaveBuild(s Streams) *cobra.Command {
	o := &enclaveBuild{}
	cmd := &cobra.Command{
		Use:   "build -f RESOURCE.yaml --kernel FILE --init FILE --nsm FILE --orchestrator FILE -o FILE.eif",
		Short: "Build the enclave image of a NitroEnclaveDeployment and print its PCR0, PCR1 and PCR2",
		Long: "Builds a Nitro Enclave image file (EIF) from AWS's boot files (nitro-cli's blobs: the kernel,\n" +
			"init and the Nitro Secure Module driver), cloister-enclave's orchestrator, and the image of\n" +
			"each user plugin the resource names (by digest, from its registry, for the enclave's\n" +
			"architecture). The same inputs give the same file, so the PCRs it prints are what the\n" +
			"enclave's attestation documents will carry: pin them in a policy.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), s, build.Remote()) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.file, "filename", "f", "", "the NitroEnclaveDeployment (YAML)")
	f.StringVar(&o.kernel, "kernel", "", "the enclave kernel (nitro-cli's blobs: bzImage, or Image on arm64)")
	f.StringVar(&o.init, "init", "", "the enclave's init (nitro-cli's blobs: init)")
	f.StringVar(&o.nsm, "nsm", "", "the Nitro Secure Module driver (nitro-cli's blobs: nsm.ko)")
	f.StringVar(&o.orchestrator, "orchestrator", "", "cloister-enclave built for the enclave's architecture")
	f.StringVar(&o.cmdline, "cmdline", build.DefaultCmdline, "the kernel command line (nitro-cli's blobs: cmdline)")
	f.StringVar(&o.arch, "arch", "amd64", "the enclave's architecture: amd64, or arm64 (Graviton)")
	f.StringVarP(&o.output, "output", "o", "", "where to write the enclave image file")
	f.StringVar(&o.push, "push", "", "also push the enclave pods' image, --base with the image file at "+build.EIFPath+", as this reference (REPOSITORY:TAG)")
	f.StringVar(&o.base, "base", "", "with --push, the image to add the file to (default: this release's cloister-enclave image)")
	f.BoolVar(&o.update, "update", false, "write the PCRs (and with --push the pods' image, by digest) into the resource's file")
	return cmd
}

func (o *enclaveBuild) run(ctx context.Context, s Streams, fetch build.Fetcher) error {
	if o.file == "" || o.output == "" {
		return errors.New("-f (the NitroEnclaveDeployment) and -o (the image file to write) are required")
	}
	r := build.Request{ResourcePath: o.file, Update: o.update, Cmdline: o.cmdline, Arch: o.arch,
		Version: version.Get().Version, Fetch: fetch, Output: o.output, Push: o.push, Base: o.base, Err: s.Err}
	var err error
	if r.Resource, err = readBounded("filename", o.file, maxResource); err != nil {
		return err
	}
	for flag, target := range map[string]*[]byte{"kernel": &r.Kernel, "init": &r.Init, "nsm": &r.NSM, "orchestrator": &r.Orchestrator} {
		path := map[string]string{"kernel": o.kernel, "init": o.init, "nsm": o.nsm, "orchestrator": o.orchestrator}[flag]
		if path == "" {
			return fmt.Errorf("--%s: required", flag)
		}
		if *target, err = readBounded(flag, path, maxBootFile); err != nil {
			return err
		}
	}
	if r.Push != "" && r.Base == "" {
		if r.Base = EnclaveImage; r.Base == "" {
			if r.Base, err = releaseImage("cloister-enclave"); err != nil {
				return fmt.Errorf("--base: %w", err)
			}
		}
	}
	res, err := build.Run(ctx, r)
	if err != nil {
		return err
	}
	printPCRs(s, res.PCRs)
	return nil
}

func printPCRs(s Streams, pcrs eif.PCRs) {
	p0, p1, p2 := pcrs.Hex()
	_, _ = fmt.Fprintf(s.Out, "PCR0 %s\nPCR1 %s\nPCR2 %s\n", p0, p1, p2)
}

func newEnclaveDescribe(s Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "describe FILE.eif",
		Short: "Print an enclave image file's PCR0, PCR1 and PCR2",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			data, err := readBounded("describe", args[0], maxEIF)
			if err != nil {
				return err
			}
			img, err := eif.Parse(data)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			printPCRs(s, eif.Measure(img))
			return nil
		},
	}
}
