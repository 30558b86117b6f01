// Command cloister-cas is the attestation and configuration service; see
// internal/cas.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/cas"
)

func main() { startup.Main("cloister-cas", run) }

func run(ctx context.Context) error {
	cfg := cas.Config{}
	fs := flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
	cfg.AddFlags(fs)
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	return cas.Run(ctx, cfg, log)
}
