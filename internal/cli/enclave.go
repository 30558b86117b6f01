package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/atomicfile"
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
	data, ned, err := readNED(o.file)
	if err != nil {
		return err
	}
	in := build.Inputs{Cmdline: o.cmdline, Arch: o.arch, Name: ned.Name, Version: version.Get().Version, Fetch: fetch,
		ManifestKey: []byte(ned.Spec.ManifestKey)}
	for _, p := range ned.Spec.UserPlugins {
		in.Plugins = append(in.Plugins, build.Plugin{Name: p.Name, Image: p.Image})
	}
	for flag, target := range map[string]*[]byte{"kernel": &in.Kernel, "init": &in.Init, "nsm": &in.NSM, "orchestrator": &in.Orchestrator} {
		path := map[string]string{"kernel": o.kernel, "init": o.init, "nsm": o.nsm, "orchestrator": o.orchestrator}[flag]
		if path == "" {
			return fmt.Errorf("--%s: required", flag)
		}
		if *target, err = readBounded(flag, path, maxBootFile); err != nil {
			return err
		}
	}
	img, err := build.Build(ctx, in)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	pcrs, err := img.Write(&out)
	if err != nil {
		return err
	}
	if _, err := atomicfile.WriteIfChanged(o.output, out.Bytes(), 0o644); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(s.Err, "wrote %s (%d bytes)\n", o.output, out.Len())
	podImage := ""
	if o.push != "" {
		if podImage, err = o.pushPodImage(ctx, out.Bytes(), pcrs); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(s.Err, "pushed %s\n", podImage)
	}
	printPCRs(s, pcrs)
	if !o.update {
		return nil
	}
	pinned, err := build.Pin(data, podImage, pcrs)
	if err != nil {
		return fmt.Errorf("-f %s: %w", o.file, err)
	}
	if _, err := atomicfile.WriteIfChanged(o.file, pinned, 0o644); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(s.Err, "updated %s: spec.enclave.pcrs%s\n", o.file, map[bool]string{true: " and spec.image", false: ""}[podImage != ""])
	return nil
}

// readNED reads the NitroEnclaveDeployment of -f, strictly, and its bytes.
func readNED(file string) ([]byte, *enclavev1beta1.NitroEnclaveDeployment, error) {
	data, err := readBounded("filename", file, maxResource)
	if err != nil {
		return nil, nil, err
	}
	var ned enclavev1beta1.NitroEnclaveDeployment
	if err := yaml.UnmarshalStrict(data, &ned); err != nil {
		return nil, nil, fmt.Errorf("-f %s: %w", file, err)
	}
	if ned.Kind != "NitroEnclaveDeployment" || len(ned.Spec.UserPlugins) == 0 {
		return nil, nil, fmt.Errorf("-f %s: want a NitroEnclaveDeployment with userPlugins, found kind %q", file, ned.Kind)
	}
	return data, &ned, nil
}

// pushPodImage pushes the enclave pods' image (--base with the file) and
// returns it by digest.
func (o *enclaveBuild) pushPodImage(ctx context.Context, file []byte, pcrs eif.PCRs) (string, error) {
	baseRef := o.base
	if baseRef == "" {
		if baseRef = EnclaveImage; baseRef == "" {
			var err error
			if baseRef, err = releaseImage("cloister-enclave"); err != nil {
				return "", fmt.Errorf("--base: %w", err)
			}
		}
	}
	ref, err := name.ParseReference(baseRef)
	if err != nil {
		return "", fmt.Errorf("--base %q: %w", baseRef, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: o.arch})}
	base, err := remote.Image(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("--base %s: %w", baseRef, err)
	}
	img, err := build.PodImage(base, file, pcrs)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(o.push)
	if err != nil {
		return "", fmt.Errorf("--push %q: %w", o.push, err)
	}
	if err := remote.Write(tag, img, opts...); err != nil {
		return "", fmt.Errorf("pushing %s: %w", tag, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return tag.Context().Digest(digest.String()).String(), nil
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
