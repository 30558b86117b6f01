// Package shipped names the files Cloister's images carry besides their
// binary, for make images (hack/images) and the end-to-end tests' images
// alike, so both build the same image of each binary.
package shipped

import (
	"path"

	"github.com/cloister-cc/cloister/internal/cas/gramine"
	"github.com/cloister-cc/cloister/internal/dev/image"
)

// Files are the files of each image, by name: the CAS image has the
// Gramine manifest template an SGX build of it signs (docs/cas.md).
var Files = map[string][]image.File{
	"cloister-cas": {{Path: path.Join(gramine.Dir, gramine.TemplateName), Data: gramine.Template}},
}
