package devcmd

import (
	"errors"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

// newDevGoBuild is what make build runs: go build with the toolchain's
// progress lines, so a cold build of Cloister's own binaries is not minutes
// of silence.
func newDevGoBuild(s Streams) *cobra.Command {
	return &cobra.Command{
		Use:    "go-build -- [go build flags] PACKAGES...",
		Short:  "go build -v, saying every few seconds how many packages are compiled",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			goBin, err := exec.LookPath("go")
			if err != nil {
				return errors.New("the go command is not on PATH")
			}
			flags, pkgs := splitBuildArgs(args)
			if len(pkgs) == 0 {
				return errors.New("no packages to build: name them last (./cmd/...)")
			}
			dir, err := os.Getwd()
			if err != nil {
				return err
			}
			return toolchain.GoBuild(cmd.Context(), goBin, dir, os.Environ(), flags, pkgs, "cloister "+strings.Join(pkgs, " "), s.Err)
		},
	}
}

// splitBuildArgs takes the trailing arguments that name packages (./...,
// or import paths) from go build's flags before them.
func splitBuildArgs(args []string) (flags, pkgs []string) {
	i := len(args)
	for i > 0 && !strings.HasPrefix(args[i-1], "-") && (i < 2 || !takesValue(args[i-2])) {
		i--
	}
	return args[:i], args[i:]
}

// takesValue: go build's flags that take the next argument as their value.
func takesValue(flag string) bool {
	if strings.Contains(flag, "=") {
		return false
	}
	switch strings.TrimLeft(flag, "-") {
	case "o", "ldflags", "gcflags", "asmflags", "tags", "mod", "modfile", "p", "pkgdir", "toolexec", "overlay", "pgo", "C", "buildmode", "compiler", "installsuffix", "covermode", "coverpkg", "gccgoflags":
		return true
	}
	return false
}
