package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

func newVault(s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "vault", Short: "A confidential Vault's owners: open their recovery key"}
	cmd.AddCommand(newVaultRecoveryKey(s))
	return cmd
}

func newVaultRecoveryKey(s Streams) *cobra.Command {
	var key, bundle string
	cmd := &cobra.Command{
		Use:   "recovery-key --key OWNER.pem --bundle RECOVERY.json",
		Short: "Open this owner's recovery key of a Vault (for vault operator generate-root or rekey)",
		Long: "recovery-key opens the owner's share of a Vault's recovery keys, which the Vault sealed to\n" +
			"each owner's key when it initialised itself: the bundle is the Secret status.recoveryKeysSecret\n" +
			"names (kubectl get secret NAME -o jsonpath='{.data.recovery\\.json}' | base64 -d). It prints\n" +
			"the key as Vault takes it (base64). Keep it off shared terminals and logs.",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if key == "" || bundle == "" {
				return errors.New("--key and --bundle are required: the owner's private key and the recovery bundle")
			}
			k, err := policy.ReadKeyFile(key)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			data, err := readBounded("bundle", bundle, vaultinit.MaxBundle)
			if err != nil {
				return err
			}
			b, err := vaultinit.ParseBundle(data)
			if err != nil {
				return fmt.Errorf("--bundle %s: %w", bundle, err)
			}
			share, err := b.Open(k)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(s.Out, "%s\n", share)
			return err
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the owner's private key (cloister policy keygen)")
	cmd.Flags().StringVar(&bundle, "bundle", "", "the Vault's recovery bundle (recovery.json of its recovery Secret)")
	return cmd
}
