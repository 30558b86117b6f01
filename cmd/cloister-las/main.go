// Command cloister-las is the local attestation service on every SGX
// node; see internal/las.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/las"
	"github.com/cloister-cc/cloister/internal/las/aesm"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
)

func main() { startup.Main("cloister-las", run) }

func run(ctx context.Context) error {
	cfg := las.Config{}
	fs := flag.NewFlagSet("cloister-las", flag.ContinueOnError)
	fs.IntVar(&cfg.Port, "port", laswire.DefaultPort, "port of the local attestation API (a hostPort)")
	fs.StringVar(&cfg.DevRoot, "dev-root", "/dev", "where the SGX device nodes are")
	fs.DurationVar(&cfg.ProbeInterval, "probe-interval", las.DefaultProbeInterval, "how often to check unprivileged access to sgx_enclave")
	fs.BoolVar(&cfg.Simulation, "simulation", false, "issue simulated (insecure) evidence signed by this node's key")
	fs.StringVar(&cfg.KeyFile, "key-file", "", "where this node's simulation key is kept (made when missing); empty: a key per process")
	fs.BoolVar(&cfg.PodIdentity, "pod-identity", false, "with --simulation: name the calling pod's policy in its evidence (reads pods of this node from the API server)")
	fs.StringVar(&cfg.AESMSocket, "aesm-socket", aesm.DefaultSocket, "without --simulation: the node's AESM socket, through which enclaves' REPORTs are quoted (DCAP); empty: none")
	cfg.Node = os.Getenv("NODE_NAME")
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	return las.Run(ctx, cfg, log.With("node", os.Getenv("NODE_NAME")))
}
