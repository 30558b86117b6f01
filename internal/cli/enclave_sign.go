package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/enclave/build"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

func newEnclaveSign(s Streams) *cobra.Command {
	var file, keyFile string
	cmd := &cobra.Command{
		Use:   "sign -f RESOURCE.yaml --key OWNER.pem",
		Short: "Sign the enclave manifest a NitroEnclaveDeployment derives, for its spec.manifestSignature",
		Long: "Derives the enclave manifest of the resource (its plugins' images, commands, arguments,\n" +
			"environment and ports) and signs it with the owner's private key, whose public key is the\n" +
			"resource's spec.manifestKey (and, built into the enclave image, what the enclave checks).\n" +
			"Prints the signature: put it into spec.manifestSignature. Any change of the plugins\n" +
			"needs a new one; the enclave refuses a manifest without it.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if file == "" || keyFile == "" {
				return errors.New("-f (the NitroEnclaveDeployment) and --key (the owner's private key) are required")
			}
			data, err := readBounded("filename", file, maxResource)
			if err != nil {
				return err
			}
			ned, err := build.ParseResource(data)
			if err != nil {
				return fmt.Errorf("-f %s: %w", file, err)
			}
			key, err := policy.ReadKeyFile(keyFile)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			sig, m, err := manifest.SignSpec(&ned.Spec, key)
			if err != nil {
				return fmt.Errorf("-f %s with --key %s: %w", file, keyFile, err)
			}
			_, _ = fmt.Fprintln(s.Out, sig)
			_, _ = fmt.Fprintf(s.Err, "manifest %s signed: put the line above into spec.manifestSignature\n", m.ManifestDigest())
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the NitroEnclaveDeployment (YAML)")
	cmd.Flags().StringVar(&keyFile, "key", "", "the owner's private key (PEM, ECDSA P-256)")
	return cmd
}
