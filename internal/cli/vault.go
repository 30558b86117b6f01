package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/kubeconfig"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	vaultcontroller "github.com/cloister-cc/cloister/internal/operator/controller/vault"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

func newVault(s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "vault", Short: "A confidential Vault's owners: make the policy they sign, open their recovery key"}
	cmd.AddCommand(newVaultPolicy(s), newVaultRecoveryKey(s))
	return cmd
}

func newVaultPolicy(s Streams) *cobra.Command {
	var kubeconfigPath, kubeContext, initializer string
	cmd := &cobra.Command{
		Use:   "policy NAMESPACE/NAME",
		Short: "Make the policy of a Vault resource's pods from its spec, as its owners sign it",
		Long: "policy makes the CAS policy of a Vault's pods here, from the Vault's spec, its CAS and its\n" +
			"runtime class, with the initializer image you trust, the way the operator makes it, and prints\n" +
			"it for cloister policy sign. It fails, after printing, when the policy the operator published\n" +
			"(status.policyDigest) is another one: then sign neither before you know why.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, ok := strings.Cut(args[0], "/")
			if !ok || ns == "" || name == "" {
				return fmt.Errorf("%q: name the Vault as NAMESPACE/NAME", args[0])
			}
			if initializer == "" {
				var err error
				if initializer, err = releaseImage("cloister-initializer"); err != nil {
					return fmt.Errorf("--initializer-image: %w", err)
				}
			}
			cfg, err := kubeconfig.RESTConfig(kubeconfigPath, kubeContext)
			if err != nil {
				return err
			}
			scheme := runtime.NewScheme()
			for _, add := range []func(*runtime.Scheme) error{basev1beta1.AddToScheme, servicesv1beta1.AddToScheme} {
				if err := add(scheme); err != nil {
					return err
				}
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return err
			}
			var v servicesv1beta1.Vault
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: name}, &v); err != nil {
				return fmt.Errorf("the Vault %s: %w", args[0], err)
			}
			doc, err := vaultcontroller.Render(cmd.Context(), c, &v, initializer)
			if err != nil {
				return fmt.Errorf("the Vault %s: %w", args[0], err)
			}
			text, err := sigsyaml.JSONToYAML(doc.Canonical())
			if err != nil {
				return err
			}
			if _, err := s.Out.Write(text); err != nil {
				return err
			}
			if got := v.Status.PolicyDigest; got != "" && got != doc.Digest() {
				return fmt.Errorf("the operator published policy %s, the spec makes %s: sign neither before you know why (another initializer image, another operator version?)", got, doc.Digest())
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&initializer, "initializer-image", InitializerImage, "the initializer image you trust, pinned by digest (the operator's --initializer-image)")
	fl.StringVar(&kubeconfigPath, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fl.StringVar(&kubeContext, "context", "", "kubeconfig context")
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
