package build

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	"github.com/cloister-cc/cloister/internal/enclave/eif"
)

// ParseResource reads a NitroEnclaveDeployment strictly; it must name user
// plugins, which are what its enclave image holds.
func ParseResource(data []byte) (*enclavev1beta1.NitroEnclaveDeployment, error) {
	var ned enclavev1beta1.NitroEnclaveDeployment
	if err := yaml.UnmarshalStrict(data, &ned); err != nil {
		return nil, err
	}
	if ned.Kind != "NitroEnclaveDeployment" || len(ned.Spec.UserPlugins) == 0 {
		return nil, fmt.Errorf("want a NitroEnclaveDeployment with userPlugins, found kind %q", ned.Kind)
	}
	return &ned, nil
}

// Request is one build of a NitroEnclaveDeployment's enclave image file.
type Request struct {
	// Resource is the NitroEnclaveDeployment's YAML, at ResourcePath,
	// which Update rewrites with the PCRs (and the pushed pods' image).
	Resource     []byte
	ResourcePath string
	Update       bool
	// The boot files (AWS's), the orchestrator and the kernel command
	// line; Arch is the enclave's architecture.
	Kernel, Init, NSM, Orchestrator []byte
	Cmdline, Arch, Version          string
	Fetch                           Fetcher
	// Output is where the image file goes.
	Output string
	// Push, when set, is where the enclave pods' image goes: Base with
	// the image file in it.
	Push, Base string
	// Err is told what was written.
	Err io.Writer
}

// Result is what a build made.
type Result struct {
	PCRs     eif.PCRs
	PodImage string // by digest; empty without Push
}

// Run builds the image file, writes it, pushes the pods' image when asked,
// and updates the resource's file when asked.
func Run(ctx context.Context, r Request) (*Result, error) {
	ned, err := ParseResource(r.Resource)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.ResourcePath, err)
	}
	in := Inputs{Cmdline: r.Cmdline, Arch: r.Arch, Name: ned.Name, Version: r.Version, Fetch: r.Fetch,
		ManifestKey: []byte(ned.Spec.ManifestKey), Kernel: r.Kernel, Init: r.Init, NSM: r.NSM, Orchestrator: r.Orchestrator}
	for _, p := range ned.Spec.UserPlugins {
		in.Plugins = append(in.Plugins, Plugin{Name: p.Name, Image: p.Image})
	}
	img, err := Build(ctx, in)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	res := &Result{}
	if res.PCRs, err = img.Write(&out); err != nil {
		return nil, err
	}
	if _, err := atomicfile.WriteIfChanged(r.Output, out.Bytes(), 0o644); err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(r.Err, "wrote %s (%d bytes)\n", r.Output, out.Len())
	if r.Push != "" {
		if res.PodImage, err = PushPodImage(ctx, r.Base, r.Push, r.Arch, out.Bytes(), res.PCRs); err != nil {
			return nil, err
		}
		_, _ = fmt.Fprintf(r.Err, "pushed %s\n", res.PodImage)
	}
	if !r.Update {
		return res, nil
	}
	pinned, err := Pin(r.Resource, res.PodImage, res.PCRs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.ResourcePath, err)
	}
	if _, err := atomicfile.WriteIfChanged(r.ResourcePath, pinned, 0o644); err != nil {
		return nil, err
	}
	_, _ = fmt.Fprintf(r.Err, "updated %s: spec.enclave.pcrs%s\n", r.ResourcePath, map[bool]string{true: " and spec.image", false: ""}[res.PodImage != ""])
	return res, nil
}

// PushPodImage pushes the enclave pods' image (the base image, for arch,
// with the image file in it) as push and returns it by digest.
func PushPodImage(ctx context.Context, base, push, arch string, file []byte, pcrs eif.PCRs) (string, error) {
	ref, err := name.ParseReference(base)
	if err != nil {
		return "", fmt.Errorf("the base image %q: %w", base, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: arch})}
	baseImg, err := remote.Image(ref, opts...)
	if err != nil {
		return "", fmt.Errorf("the base image %s: %w", base, err)
	}
	img, err := PodImage(baseImg, file, pcrs)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(push)
	if err != nil {
		return "", fmt.Errorf("the pods' image %q: %w", push, err)
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
