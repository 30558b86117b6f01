// Command cloister-initializer is the first init container of
// confidential pods; see internal/workload/initializer.
package main

import (
	"context"
	"flag"
	"os"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/base/startup"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	"github.com/cloister-cc/cloister/internal/workload/initializer"
)

func main() { startup.Main("cloister-initializer", run) }

func run(ctx context.Context) error {
	cfg := initializer.Config{
		CAS: os.Getenv(initenv.EnvCAS), Expect: os.Getenv(initenv.EnvExpect), SimKey: os.Getenv(initenv.EnvCASSimKey), Policy: os.Getenv(initenv.EnvPolicy),
		Service: os.Getenv(initenv.EnvService), PolicyOwners: os.Getenv(initenv.EnvPolicyOwners), PolicyOwnerThreshold: os.Getenv(initenv.EnvPolicyOwnerThreshold), LAS: os.Getenv(laswire.EnvAddr),
		Evidence: os.Getenv(initenv.EnvEvidence), Guest: produce.Paths{TSM: os.Getenv(initenv.EnvTSM), Gramine: os.Getenv(initenv.EnvGramine)},
		TestRoots: os.Getenv(initenv.EnvInsecureTestRoots),
	}
	fs := flag.NewFlagSet("cloister-initializer", flag.ContinueOnError)
	fs.StringVar(&cfg.Out, "out", initenv.DefaultOut, "folder for the certificate, key, CAs, env and files")
	premain := fs.Bool("exec", false, "a premain: once attested, become the program the arguments after -- name, in this process (an SGX enclave's), with the policy's env")
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	if cfg.Exec, err = initializer.ExecArgs(*premain, fs.Args()); err != nil {
		return err
	}
	return initializer.Run(ctx, cfg, log)
}
