package image

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cloister-cc/cloister/internal/base/elfarch"
)

// Platform is what an image's binaries run on.
type Platform struct{ OS, Architecture string }

// String is OS/ARCH, as Go, OCI and Kubernetes write a platform.
func (p Platform) String() string { return p.OS + "/" + p.Architecture }

// OCI is p as an image index names it.
func (p Platform) OCI() *v1.Platform { return &v1.Platform{OS: p.OS, Architecture: p.Architecture} }

// Host is the platform of the machine that builds: what make build,
// make demo and make test build images for, and what the dev cluster's
// real node runs.
func Host() Platform { return Platform{OS: "linux", Architecture: runtime.GOARCH} }

// All are the platforms a release's images are built for: x86, Graviton
// (AWS Nitro Enclaves on arm64 instances) and IBM Z (CryptoExpress).
var All = []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"linux", "s390x"}}

// ParsePlatforms reads make's PLATFORMS: "host" (or empty), "all", or a
// comma-separated list of All's OS/ARCH. The result is in All's order
// (the host's first when it is not among All), without repeats, so the
// same list always gives the same index.
func ParsePlatforms(s string) ([]Platform, error) {
	switch strings.TrimSpace(s) {
	case "", "host":
		return []Platform{Host()}, nil
	case "all":
		return slices.Clone(All), nil
	}
	var want []Platform
	for _, field := range strings.Split(s, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(field), "/")
		p := Platform{os, arch}
		if !ok || (!slices.Contains(All, p) && p != Host()) {
			return nil, fmt.Errorf("platform %q: want host, all, or a comma-separated list of %s", field, platformList(All))
		}
		want = append(want, p)
	}
	order := All
	if !slices.Contains(All, Host()) {
		order = append([]Platform{Host()}, All...)
	}
	var out []Platform
	for _, p := range order {
		if slices.Contains(want, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func platformList(ps []Platform) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.String()
	}
	return strings.Join(names, ", ")
}

// Dir is the folder of p's binaries under make build's bin: bin itself
// for the host, bin/OS_ARCH for the others (what make build writes with
// PLATFORMS).
func (p Platform) Dir(bin string) string {
	if p == Host() {
		return bin
	}
	return filepath.Join(bin, p.OS+"_"+p.Architecture)
}

// checkMachine refuses a binary that is no executable of p: a stale
// folder of another platform's binaries must not end up in p's image.
func checkMachine(name string, data []byte, p Platform) error {
	if p.OS != "linux" {
		return fmt.Errorf("%s: images are for linux, not %s", name, p.OS)
	}
	if err := elfarch.Check(name, data, p.Architecture); err != nil {
		return fmt.Errorf("%w (for %s)", err, p)
	}
	return nil
}
