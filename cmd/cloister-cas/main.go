// Command cloister-cas is the attestation and configuration service; see
// internal/casd.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cloister-cc/cloister/internal/casd"
)

func main() {
	cfg := casd.Config{}
	var sans string
	fs := flag.NewFlagSet("cloister-cas", flag.ExitOnError)
	fs.StringVar(&cfg.Listen, "listen", casd.DefaultListen, "address of the HTTPS API (seed 000's client port)")
	fs.StringVar(&cfg.StateDir, "state-dir", "/var/lib/cloister-cas", "where CAS keeps its state (the CAS volume)")
	fs.StringVar(&cfg.Sealer, "sealer", "none", "none (owners recover after every restart) or file:PATH (development: the seed in a file)")
	fs.StringVar(&sans, "tls-san", "", "extra DNS names / IPs of the TLS certificate, comma-separated")
	fs.StringVar(&cfg.CollateralDir, "collateral-dir", "", "Intel PCS collateral / SNP VCEK for hardware evidence")
	fs.BoolVar(&cfg.Simulation, "simulation", false, "vouch for the TLS key with simulated (insecure) evidence")
	_ = fs.Parse(os.Args[1:])
	if sans != "" {
		cfg.TLSSANs = strings.Split(sans, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := casd.Run(ctx, cfg, log); err != nil {
		fmt.Fprintf(os.Stderr, "cloister-cas: %v\n", err)
		os.Exit(1)
	}
}
