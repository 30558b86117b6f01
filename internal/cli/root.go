// Package cli owns the `cloister` command tree (also installed as
// kubectl-cloister). Commands parse and validate flags, then call the
// internal packages that do the work.
package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Streams are where a command writes: results to Out, progress and
// diagnostics to Err; In is what "-" reads.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// NewRoot builds the `cloister` command.
func NewRoot(s Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "cloister",
		Short: "Confidential computing on Kubernetes, declaratively",
		Long: "cloister manages Cloister: a local dev cluster, the operator, policies and\n" +
			"attestation evidence for SGX, TDX, SEV-SNP, Nitro Enclaves and IBM CryptoExpress.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nrun '%s --help' for usage", err, c.CommandPath())
	})
	root.AddCommand(newVersion(s), newDev(s), newEvidence(s), newPolicy(s), newCAS(s), newInstall(s), newGenerate(s), newReferenceValues(s), newEnclave(s), newSet(s), newVerify(s), newRecover(s), newVault(s), newWitness(s))
	return root
}
