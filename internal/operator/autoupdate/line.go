// Package autoupdate finds the image spec.autoUpdate moves a service to:
// the newest tag of its image's version line (same repository, major and
// minor version; no pre-releases) in the registry, pinned by digest, read
// with the service's pull secrets. The choice is pure (Newest); the
// registry and the secrets are at the edge (Resolver, Keychain).
package autoupdate

import (
	"fmt"
	"strings"

	"golang.org/x/mod/semver"
)

// Line is a repository and the version line of one of its tags.
type Line struct {
	Repository string
	// Tag is the image's own tag (v1.2.3 or 1.2.3).
	Tag string
}

// ParseLine reads an image reference (REPOSITORY:TAG, with or without
// @DIGEST) whose tag is a semantic version.
func ParseLine(image string) (Line, error) {
	ref := image
	if at := strings.IndexByte(ref, '@'); at >= 0 {
		ref = ref[:at]
	}
	colon := strings.LastIndexByte(ref, ':')
	if colon < 0 || colon < strings.LastIndexByte(ref, '/') {
		return Line{}, fmt.Errorf("image %s has no tag: autoUpdate follows a semantic-version tag (REPOSITORY:v1.2.3)", image)
	}
	l := Line{Repository: ref[:colon], Tag: ref[colon+1:]}
	if v := canonical(l.Tag); v == "" || semver.Prerelease(v) != "" || semver.Build(v) != "" {
		return Line{}, fmt.Errorf("image %s: tag %q is no release version vMAJOR.MINOR.PATCH, so autoUpdate has no line to follow", image, l.Tag)
	}
	return l, nil
}

// canonical is tag as a semantic version with its v, or "" when it is none
// or not all three numbers.
func canonical(tag string) string {
	v := tag
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	if !semver.IsValid(v) || strings.Count(strings.SplitN(strings.SplitN(v, "-", 2)[0], "+", 2)[0], ".") != 2 {
		return ""
	}
	return v
}

// Newest is the highest release tag of the line among tags, and whether
// it is newer than the line's own tag. Tags of other lines, pre-releases
// and non-versions are ignored.
func (l Line) Newest(tags []string) (string, bool) {
	own := canonical(l.Tag)
	best, bestV := l.Tag, own
	for _, t := range tags {
		v := canonical(t)
		if v == "" || semver.Prerelease(v) != "" || semver.Build(v) != "" || semver.MajorMinor(v) != semver.MajorMinor(own) {
			continue
		}
		if semver.Compare(v, bestV) > 0 {
			best, bestV = t, v
		}
	}
	return best, semver.Compare(bestV, own) > 0
}
