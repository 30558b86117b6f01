// Command gobuild is how make compiles Cloister: go build -v in the one
// configuration every make target builds and runs Cloister's code with
// (CGO_ENABLED=0, -trimpath), so Go's build cache compiles each package
// once, saying every few seconds how far it is, as the toolchain's builds
// do. It needs nothing but the standard library and the toolchain package,
// so it compiles in seconds before anything else.
//
//	go run ./hack/gobuild [go build flags] PACKAGES...
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cloister-cc/cloister/internal/dev/toolchain"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gobuild:", err)
		os.Exit(1)
	}
}

func run() error {
	flags, pkgs := toolchain.SplitBuildArgs(os.Args[1:])
	if len(pkgs) == 0 {
		return fmt.Errorf("no packages to build: name them last (./cmd/...)")
	}
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := append(os.Environ(), toolchain.BuildEnv...)
	flags = append(append([]string{}, toolchain.BuildFlags...), flags...)
	return toolchain.GoBuild(ctx, goBin, dir, env, flags, pkgs, "cloister "+strings.Join(pkgs, " "), os.Stderr)
}
