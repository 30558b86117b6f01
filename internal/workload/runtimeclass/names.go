// Package runtimeclass owns the confidential runtime's names: the versioned
// RuntimeClass and containerd handler of each platform, so two Cloister
// versions can be installed side by side and generate names the one its
// version installs.
package runtimeclass

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
)

// Platform is where confidential pods run; it decides the runtime
// handler and which evidence names the pod policy digest.
type Platform string

const (
	// Sim: runc underneath, LAS vouches for the pod's policy; insecure.
	Sim Platform = "sim"
	// SNP: Kata on SEV-SNP, the digest is HOSTDATA.
	SNP Platform = "snp"
	// TDX: Kata on TDX, the digest is MRCONFIGID.
	TDX Platform = "tdx"
	// SGX has no runtime class: its pods run under their node's own
	// runtime, the TEE an enclave inside a container, identified by its
	// MRENCLAVE rather than a pod policy digest. Generate takes it; a
	// node installer does not (it is not among Platforms).
	SGX Platform = "sgx"
)

// Platforms lists the platforms of runtime classes, for help and errors.
var Platforms = []Platform{Sim, SNP, TDX}

// ParsePlatform reads a platform name.
func ParsePlatform(s string) (Platform, error) {
	if p := Platform(s); slices.Contains(Platforms, p) {
		return p, nil
	}
	return "", fmt.Errorf("unknown platform %q: use sim, snp or tdx", s)
}

// Prefix starts every runtime class Cloister installs; generate's
// placeholder is the prefix alone.
const Prefix = "cloister-cc"

// ClassName is the RuntimeClass (and containerd handler) name of platform
// for a Cloister version: the platform and a short hash of the version,
// since versions hold characters a name may not ("v1.2.3-4-gabc+dirty").
func ClassName(platform Platform, version string) string {
	h := sha256.Sum256([]byte(version))
	return Prefix + "-" + string(platform) + "-" + hex.EncodeToString(h[:4])
}

// NodeLabel is the label (value "true") of the nodes whose containerd has
// the handler className: its RuntimeClass schedules pods there only.
func NodeLabel(className string) string { return "runtime.cloister.dev/" + className }
