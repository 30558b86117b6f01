// Command cloister-cas is the attestation and configuration service; see
// internal/cas. "cloister-cas backup" exports a CAS's state once, as the
// CAS resource's scheduled backup does.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/cas"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "backup" {
		startup.Main("cloister-cas backup", runBackup)
		return
	}
	startup.Main("cloister-cas", run)
}

func run(ctx context.Context) error {
	cfg := cas.Config{}
	fs := flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
	cfg.AddFlags(fs)
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	if err := cfg.ApplyHostEnv(fs, os.Getenv); err != nil {
		return err
	}
	return cas.Run(ctx, cfg, log)
}

func runBackup(ctx context.Context) error {
	cfg := cas.BackupConfig{}
	fs := flag.NewFlagSet("cloister-cas backup", flag.ContinueOnError)
	cfg.AddFlags(fs)
	log, err := startup.ParseFlags(fs, os.Args[2:], os.Stderr)
	if err != nil {
		return err
	}
	return cas.Backup(ctx, cfg, log)
}
