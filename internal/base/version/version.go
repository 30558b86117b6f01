// Package version owns the build identity of every Cloister binary.
// The Makefile sets the variables with -ldflags -X; `go build` without them
// falls back to the module build information.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Kubernetes is the Kubernetes release Cloister builds its toolchain from,
// tests against, renders charts for and takes its client libraries from
// (k8s.io/* v0.37.1); hack/tools/go.mod pins the same release, and a test
// of internal/dev/toolchain keeps the three in step.
const Kubernetes = "v1.37.1"

// Set at link time: -X github.com/cloister-cc/cloister/internal/base/version.Version=...
var (
	Version = ""
	Commit  = ""
)

// Info is the build identity printed by `version` subcommands.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the identity of the running binary.
func Get() Info {
	info := Info{
		Version:   Version,
		Commit:    Commit,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.Commit == "" {
				info.Commit = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}
