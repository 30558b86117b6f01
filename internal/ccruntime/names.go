// Package ccruntime owns the confidential runtime's names: the versioned
// RuntimeClass and containerd handler of each platform, so two Cloister
// versions can be installed side by side and generate names the one its
// version installs.
package ccruntime

import (
	"crypto/sha256"
	"encoding/hex"
)

// Prefix starts every runtime class Cloister installs; generate's
// placeholder is the prefix alone.
const Prefix = "cloister-cc"

// ClassName is the RuntimeClass (and containerd handler) name of platform
// for a Cloister version: the platform and a short hash of the version,
// since versions hold characters a name may not ("v1.2.3-4-gabc+dirty").
func ClassName(platform, version string) string {
	h := sha256.Sum256([]byte(version))
	return Prefix + "-" + platform + "-" + hex.EncodeToString(h[:4])
}
