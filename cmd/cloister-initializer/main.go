// Command cloister-initializer is the first init container of
// confidential pods; see internal/workload/initializer.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/workload/initializer"
)

func main() { startup.Main("cloister-initializer", run) }

func run(ctx context.Context) error {
	cfg := initializer.Config{
		CAS: os.Getenv(initializer.EnvCAS), Expect: os.Getenv(initializer.EnvExpect), Policy: os.Getenv(initializer.EnvPolicy),
		Service: os.Getenv(initializer.EnvService), LAS: os.Getenv(initializer.EnvLAS),
	}
	fs := flag.NewFlagSet("cloister-initializer", flag.ContinueOnError)
	fs.StringVar(&cfg.Out, "out", initializer.DefaultOut, "folder for the certificate, key, CAs, env and files")
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	return initializer.Run(ctx, cfg, log)
}
