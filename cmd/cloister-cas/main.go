// Command cloister-cas is the attestation and configuration service; see
// internal/cas.
package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/cas"
)

func main() { startup.Main("cloister-cas", run) }

func run(ctx context.Context) error {
	cfg := cas.Config{}
	var sans string
	fs := flag.NewFlagSet("cloister-cas", flag.ContinueOnError)
	fs.StringVar(&cfg.Listen, "listen", cas.DefaultListen, "address of the HTTPS API that workloads and the CLI call")
	fs.StringVar(&cfg.StateDir, "state-dir", "/var/lib/cloister-cas", "where CAS keeps its state (the CAS volume)")
	fs.StringVar(&cfg.Sealer, "sealer", "none", "none (owners recover after every restart) or file:PATH (development: the CAS root secret in a plain file)")
	fs.StringVar(&sans, "tls-san", "", "extra DNS names / IPs of the TLS certificate, comma-separated")
	fs.StringVar(&cfg.CollateralDir, "collateral-dir", "", "Intel PCS collateral / SNP VCEK for hardware evidence")
	fs.StringVar(&cfg.SimKeys, "sim-keys", "", "file, or folder of files, of PEM public keys: the only simulation keys (LAS nodes', a developer's) whose evidence CAS takes; default any, which lets a pod claim another's identity")
	fs.BoolVar(&cfg.Simulation, "simulation", false, "insecure, development only: vouch for the TLS key with simulated evidence and accept simulated evidence from workloads whose policy allows it (refused without this flag)")
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	if sans != "" {
		cfg.TLSSANs = strings.Split(sans, ",")
	}
	return cas.Run(ctx, cfg, log)
}
