// Command cloister-las is the local attestation service on every SGX
// node; see internal/lasd.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cloister-cc/cloister/internal/lasd"
)

func main() {
	cfg := lasd.Config{}
	fs := flag.NewFlagSet("cloister-las", flag.ExitOnError)
	fs.IntVar(&cfg.Port, "port", lasd.DefaultPort, "port of the local attestation API (a hostPort)")
	fs.StringVar(&cfg.DevRoot, "dev-root", "/dev", "where the SGX device nodes are")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", lasd.DefaultProbeInterval, "how often to check unprivileged access to sgx_enclave")
	fs.BoolVar(&cfg.Simulation, "simulation", false, "issue simulated (insecure) evidence signed by this node's key")
	fs.StringVar(&cfg.KeyFile, "key-file", "", "where this node's simulation key is kept (made when missing); empty: a key per process")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("node", os.Getenv("NODE_NAME"))
	if err := lasd.Run(ctx, cfg, log); err != nil {
		fmt.Fprintf(os.Stderr, "cloister-las: %v\n", err)
		os.Exit(1)
	}
}
