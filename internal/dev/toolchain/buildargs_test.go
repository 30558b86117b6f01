package toolchain

import "testing"

func TestSplitBuildArgs(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		flags, pkgs int
	}{
		{[]string{"-trimpath", "-ldflags", "-X a=b", "-o", "bin/", "./cmd/..."}, 5, 1},
		{[]string{"./cmd/cloister", "./cmd/cloister-cas"}, 0, 2},
		{[]string{"-o", "bin/"}, 2, 0},
		{[]string{"-ldflags=-s", "./..."}, 1, 1},
	} {
		flags, pkgs := SplitBuildArgs(tc.args)
		if len(flags) != tc.flags || len(pkgs) != tc.pkgs {
			t.Errorf("%q: flags %q, packages %q", tc.args, flags, pkgs)
		}
	}
}
