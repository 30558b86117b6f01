package toolchain

import "strings"

// SplitBuildArgs takes the trailing arguments that name packages (./...,
// or import paths) from go build's flags before them.
func SplitBuildArgs(args []string) (flags, pkgs []string) {
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
