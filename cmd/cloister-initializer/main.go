// Command cloister-initializer is the first init container of
// confidential pods; see internal/workload/initializer.
package main

import (
	"context"
	"flag"
	"os"
	"strconv"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/base/startup"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	"github.com/cloister-cc/cloister/internal/workload/initializer"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

func main() { startup.Main("cloister-initializer", run) }

func run(ctx context.Context) error {
	cfg := initializer.Config{
		CAS: os.Getenv(initenv.EnvCAS), Expect: os.Getenv(initenv.EnvExpect), SimKey: os.Getenv(initenv.EnvCASSimKey), Policy: os.Getenv(initenv.EnvPolicy),
		Service: os.Getenv(initenv.EnvService), PolicyOwners: os.Getenv(initenv.EnvPolicyOwners), PolicyOwnerThreshold: os.Getenv(initenv.EnvPolicyOwnerThreshold), LAS: os.Getenv(laswire.EnvAddr),
		Evidence: os.Getenv(initenv.EnvEvidence), Guest: produce.Paths{TSM: os.Getenv(initenv.EnvTSM), Gramine: os.Getenv(initenv.EnvGramine)},
		TestRoots:     os.Getenv(initenv.EnvInsecureTestRoots),
		WitnessPolicy: os.Getenv(initenv.EnvWitnessPolicy), WitnessMaxAge: os.Getenv(initenv.EnvWitnessMaxAge), LogMemory: os.Getenv(initenv.EnvLogMemory),
	}
	fs := flag.NewFlagSet("cloister-initializer", flag.ContinueOnError)
	fs.StringVar(&cfg.Out, "out", initenv.DefaultOut, "folder for the certificate, key, CAs, env and files")
	premain := fs.Bool("exec", false, "a premain: once attested, become the program the arguments after -- name, in this process (an SGX enclave's), with the policy's env")
	vault := fs.Bool("vault-bootstrap", false, "a Vault's sidecar: initialise the Vault once from inside the pod's TEE (the first replica), recovery keys sealed to the owners, and serve them sealed")
	vaultData := fs.String("vault-data", "/vault/data", "with --vault-bootstrap: the replica's claim, where the sealed recovery keys are kept")
	vaultListen := fs.String("vault-listen", ":8202", "with --vault-bootstrap: where the sealed recovery keys are served (HTTPS)")
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	if *vault {
		threshold, _ := strconv.Atoi(os.Getenv(vaultinit.EnvThreshold))
		return vaultinit.Run(ctx, vaultinit.Config{
			Dir: cfg.Out, Vault: os.Getenv(vaultinit.EnvVault), Addr: os.Getenv(vaultinit.EnvAddr), ServerName: os.Getenv(vaultinit.EnvServerName),
			First: os.Getenv(vaultinit.EnvFirst) != "" && os.Getenv(vaultinit.EnvFirst) == os.Getenv(vaultinit.EnvPodName), Owners: vaultinit.ParseOwners(os.Getenv(vaultinit.EnvOwners)), Threshold: threshold,
			DataDir: *vaultData, Listen: *vaultListen, Poll: 2 * time.Second,
		}, log)
	}
	if cfg.Exec, err = initializer.ExecArgs(*premain, fs.Args()); err != nil {
		return err
	}
	return initializer.Run(ctx, cfg, log)
}
