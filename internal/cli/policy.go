package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/policy/policyres"
)

// defaultCASAddress is where a policy is registered unless told
// otherwise: the CAS service's client port in the namespace.
const defaultCASAddress = "cas.default.svc:8081"

func newPolicy(s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Make owner keys; sign and encrypt CAS policies as SignedPolicy/EncryptedPolicy resources"}
	cmd.AddCommand(newPolicyKeygen(s), newPolicySign(s), newPolicyEncrypt(s))
	return cmd
}

func newPolicyKeygen(s Streams) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --out KEY.pem",
		Short: "Make a policy owner key (ECDSA P-256); prints its public key for the policy's owners.keys",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if out == "" {
				return errors.New("--out is required: the file for the private key")
			}
			k, err := policy.CreateKeyFile(out)
			if err != nil {
				return fmt.Errorf("--out: %w (an existing key is never overwritten)", err)
			}
			_, err = s.Out.Write(policy.MarshalPublicKey(&k.PublicKey))
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file for the private key (created 0600; never overwritten)")
	return cmd
}

type policySign struct {
	key, casAddress, name string
	link                  linkFlags
	cas                   conn.Flags
}

func newPolicySign(s Streams) *cobra.Command {
	o := &policySign{}
	cmd := &cobra.Command{
		Use:   "sign --key KEY.pem (--version N | --after CURRENT.yaml | --cas URL | --cluster NS/NAME) [--cas-address A] POLICY|SIGNEDPOLICY",
		Short: "Sign a policy; prints the SignedPolicy resource for kubectl apply",
		Long: "Signs the policy's canonical form with an owner key and prints a SignedPolicy.\n" +
			"The signature covers the policy's version and its predecessor's digest too, so CAS takes\n" +
			"it only as that version: --version 1 for a new policy; for a change, --after with the\n" +
			"current version's SignedPolicy, or --cas/--cluster to ask CAS. Given a SignedPolicy\n" +
			"(another owner's output), adds this owner's signature to it: an update needs the\n" +
			"threshold of the current owners' signatures.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			signed, address, name, err := readSigned(cmd.Context(), s, args[0], o.key, o.casAddress, &o.link, &o.cas)
			if err != nil {
				return err
			}
			if o.name != "" {
				name = o.name
			}
			return printResource(s.Out, signed.Policy, name, func(meta metav1.ObjectMeta) any {
				return policyres.NewSignedPolicy(meta, address, signed)
			})
		},
	}
	cmd.Flags().StringVar(&o.key, "key", "", "the owner's private key (cloister policy keygen)")
	cmd.Flags().StringVar(&o.casAddress, "cas-address", "", "the CAS to register with (default "+defaultCASAddress+", or the input SignedPolicy's)")
	cmd.Flags().StringVar(&o.name, "name", "", nameHelp)
	o.link.add(cmd)
	o.cas.AddFlags(cmd.Flags())
	return cmd
}

type policyEncrypt struct {
	key, casAddress, casPublicKey, name string
	link                                linkFlags
	cas                                 conn.Flags
}

func newPolicyEncrypt(s Streams) *cobra.Command {
	o := &policyEncrypt{}
	cmd := &cobra.Command{
		Use:   "encrypt --key KEY.pem (--cas-public-key FILE | --cas URL | --cluster NS/NAME) [--cas-address A] POLICY|SIGNEDPOLICY",
		Short: "Sign a policy and seal it to one CAS; prints the EncryptedPolicy resource",
		Long: "Signs the policy (or adds a signature to a SignedPolicy) and seals the signed\n" +
			"policy to the CAS encryption key (HPKE, RFC 9180), so only that CAS can read it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			encoded, source, err := o.encryptionKey(cmd.Context(), s)
			if err != nil {
				return err
			}
			casKey, err := policy.DecodePublicKey(encoded)
			if err != nil {
				return fmt.Errorf("%s: %w", source, err)
			}
			signed, address, name, err := readSigned(cmd.Context(), s, args[0], o.key, o.casAddress, &o.link, &o.cas)
			if err != nil {
				return err
			}
			if o.name != "" {
				name = o.name
			}
			sealed, err := policy.Encrypt(signed, casKey)
			if err != nil {
				return err
			}
			return printResource(s.Out, signed.Policy, name, func(meta metav1.ObjectMeta) any {
				return policyres.NewEncryptedPolicy(meta, address, sealed)
			})
		},
	}
	cmd.Flags().StringVar(&o.key, "key", "", "the owner's private key (cloister policy keygen)")
	cmd.Flags().StringVar(&o.casPublicKey, "cas-public-key", "", "file with the CAS encryption key (base64, as GET /v1/public-key gives it)")
	cmd.Flags().StringVar(&o.casAddress, "cas-address", "", "the CAS to register with (default "+defaultCASAddress+")")
	cmd.Flags().StringVar(&o.name, "name", "", nameHelp)
	o.link.add(cmd)
	o.cas.AddFlags(cmd.Flags())
	return cmd
}

// encryptionKey reads the CAS key from --cas-public-key or asks the CAS,
// trusted as the CAS flags say: the key decides who can read the policy.
func (o *policyEncrypt) encryptionKey(ctx context.Context, s Streams) (string, string, error) {
	asked := o.cas.URL != "" || o.cas.Cluster != ""
	switch {
	case o.casPublicKey != "" && asked:
		return "", "", errors.New("--cas-public-key and --cas/--cluster: choose one")
	case o.casPublicKey != "":
		raw, err := os.ReadFile(o.casPublicKey)
		if err != nil {
			return "", "", fmt.Errorf("--cas-public-key: %w", err)
		}
		return strings.TrimSpace(string(raw)), "--cas-public-key " + o.casPublicKey, nil
	case asked:
		c, done, err := o.cas.Client(ctx, s.Err)
		if err != nil {
			return "", "", err
		}
		defer done()
		where := "--cas " + o.cas.URL
		if o.cas.Cluster != "" {
			where = "--cluster " + o.cas.Cluster
		}
		pk, err := c.PublicKey(ctx)
		if err != nil {
			return "", "", err
		}
		if pk.EncryptionKey == "" {
			return "", "", fmt.Errorf("%s is %s: it has no encryption key until it is ready", where, pk.State)
		}
		return pk.EncryptionKey, where, nil
	}
	return "", "", errors.New("--cas-public-key FILE, --cas URL or --cluster NAMESPACE/NAME is required: the CAS encryption key (GET /v1/public-key)")
}

// readSigned reads a policy document or a SignedPolicy resource and adds
// the signature of the key in keyFile; it returns the CAS address
// (casAddress when given, else the resource's, else the default) and the
// resource's name (empty for a document). A document is signed at the
// link the flags give; a SignedPolicy keeps its own, and its name.
func readSigned(ctx context.Context, s Streams, file, keyFile, casAddress string, link *linkFlags, cas *conn.Flags) (signed *policy.Signed, address, name string, err error) {
	if keyFile == "" {
		return nil, "", "", errors.New("--key is required: the owner's private key (cloister policy keygen)")
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, "", "", fmt.Errorf("--key: %w", err)
	}
	key, err := policy.ParseKey(keyPEM)
	if err != nil {
		return nil, "", "", fmt.Errorf("--key %s: %w", keyFile, err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, "", "", err
	}
	signed, address = &policy.Signed{Policy: string(data)}, defaultCASAddress
	if policyres.IsSignedPolicy(data) {
		sp, err := policyres.ParseSignedPolicy(data)
		if err != nil {
			return nil, "", "", fmt.Errorf("%s: %w", file, err)
		}
		if link.given() {
			return nil, "", "", fmt.Errorf("%s is a SignedPolicy of version %d: its version is signed already; drop --version, --predecessor and --after", file, sp.Spec.Version)
		}
		signed, address, name = policyres.Signed(sp), sp.Spec.CASAddress, sp.Name
	} else {
		doc, err := policy.Parse(data)
		if err != nil {
			return nil, "", "", fmt.Errorf("%s: %w", file, err)
		}
		if signed.Link, err = link.resolve(ctx, s, doc, cas); err != nil {
			return nil, "", "", err
		}
	}
	if err := policy.Sign(signed, key); err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", file, err)
	}
	if casAddress != "" {
		address = casAddress
	}
	return signed, address, name, nil
}

// printResource writes the resource named after the policy as YAML.
// nameHelp: every version of a policy is a resource of its own (the spec
// cannot change), so versions need names of their own.
const nameHelp = "name of the printed resource (default: the policy's name without its namespace); each version of a policy is a new resource, e.g. shop-v2"

// printResource prints the resource build makes, named name or else as
// the policy, in the Kubernetes namespace of the policy's name (shop for
// shop/web): the operator registers a resource's policy only under its
// own namespace.
func printResource(w io.Writer, text, name string, build func(metav1.ObjectMeta) any) error {
	meta, err := policyres.Meta(text, name)
	if err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	out, err := yaml.Marshal(build(meta))
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}
