package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/policy/policyres"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/las/lasclient"
)

func newCAS(s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "cas", Short: "Initialise, recover and attest to a CAS"}
	cmd.AddCommand(newCASInit(s), newCASRecover(s), newCASBoard(s), newCASRegister(s), newCASAttest(s), newCASBackup(s), newCASRestore(s))
	return cmd
}

func newCASInit(s Streams) *cobra.Command {
	var f conn.Flags
	var owners, board, approvers []string
	var threshold, boardThreshold int
	var out string
	cmd := &cobra.Command{
		Use:   "init (--cas URL|--cluster NS/NAME) [--cas-ca FILE] --recovery-owner PUB.pem... [--board PUB.pem... [--board-threshold N]] --threshold K --out shares.json",
		Short: "Make CAS generate its seed and split it among the recovery owners",
		Long: "CAS generates its root secret and splits it k-of-n among the recovery owners, each\n" +
			"share sealed to its owner's key. The shares are written to --out and kept by nobody\n" +
			"else: after a restart without a sealer, k owners recover CAS with them. The board\n" +
			"(--board; default the recovery owners) approves every new policy name, by\n" +
			"--board-threshold of its keys (default a majority).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(owners) == 0 || out == "" {
				return errors.New("--recovery-owner (at least one) and --out are required")
			}
			pems, err := readPublicKeys("--recovery-owner", owners)
			if err != nil {
				return err
			}
			boardPEMs, err := readPublicKeys("--board", board)
			if err != nil {
				return err
			}
			c, done, err := f.Client(cmd.Context(), s.Err)
			if err != nil {
				return err
			}
			defer done()
			req := &wire.InitRequest{RecoveryOwners: pems, Threshold: threshold, Board: boardPEMs, BoardThreshold: boardThreshold}
			if len(approvers) > 0 {
				// After a loss the owners of the lost CAS sign this init.
				keys, err := readKeys("--approve-key", approvers)
				if err != nil {
					return err
				}
				if req.Approvals, err = c.ApproveInit(cmd.Context(), req, keys); err != nil {
					return fmt.Errorf("--approve-key: %w", err)
				}
			} else if req.Token, err = f.InitToken(cmd.Context()); err != nil {
				return err
			}
			shares, err := c.InitInto(cmd.Context(), req, out)
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(s.Out, "CAS initialised: %d shares, any %d recover it, written to %s\n", len(shares.Shares), shares.Threshold, out)
			return nil
		},
	}
	f.AddFlags(cmd.Flags())
	f.AddInitTokenFlag(cmd.Flags())
	cmd.Flags().StringArrayVar(&owners, "recovery-owner", nil, "a recovery owner's public key (PEM, cloister policy keygen); repeat")
	cmd.Flags().StringArrayVar(&board, "board", nil, "a public key (PEM) of the board, which approves every new policy name (its first version); repeat; default the recovery owners")
	cmd.Flags().IntVar(&threshold, "threshold", 1, "how many owners' shares recover CAS")
	cmd.Flags().IntVar(&boardThreshold, "board-threshold", 0, "how many of the board's keys approve a new policy name or a wildcard (default a majority)")
	cmd.Flags().StringArrayVar(&approvers, "approve-key", nil, "after CAS lost its state: a private key of its recovery owners, who sign this init in place of the token; repeat up to their threshold")
	cmd.Flags().StringVar(&out, "out", "", "where to write the sealed shares")
	return cmd
}

func newCASRecover(s Streams) *cobra.Command {
	var f conn.Flags
	var sharesFile, keyFile string
	var force bool
	var acceptGeneration uint64
	cmd := &cobra.Command{
		Use:   "recover (--cas URL|--cluster NS/NAME) [--cas-ca FILE] --shares shares.json --key OWNER.pem [--force] [--accept-generation G]",
		Short: "Submit this owner's share to a CAS in recovery mode",
		Long: "CAS rebuilds its seed from its recovery owners' shares. A CAS whose state is older than one it\n" +
			"served (rolled back, or an older backup restored) says which generation it holds: it takes that\n" +
			"state only when its owners' threshold accept that generation (--accept-generation, signed with\n" +
			"--key for this CAS), and then moves it past every generation it served.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sharesFile == "" || keyFile == "" {
				return errors.New("--shares and --key are required")
			}
			var accept *uint64
			if cmd.Flags().Changed("accept-generation") {
				accept = &acceptGeneration
			}
			return submitShare(cmd.Context(), s, &f, sharesFile, keyFile, force, accept)
		},
	}
	f.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&sharesFile, "shares", "", "the shares file cloister cas init wrote")
	cmd.Flags().StringVar(&keyFile, "key", "", "this owner's private key")
	cmd.Flags().BoolVar(&force, "force", false, "submit the share though a ready replica of this CAS could hand it the seed")
	cmd.Flags().Uint64Var(&acceptGeneration, "accept-generation", 0, "accept the older state CAS holds, at this generation (CAS names it), signed with --key")
	return cmd
}

func newCASBoard(s Streams) *cobra.Command {
	var f conn.Flags
	var members, board []string
	var threshold int
	cmd := &cobra.Command{
		Use:   "board (--cas URL|--cluster NS/NAME) [--cas-ca FILE] --key MEMBER.pem... --board PUB.pem... [--threshold N]",
		Short: "Replace the board that approves new policy names, signed by the current board",
		Long: "The board's members (--key, repeat) sign the new board (--board, repeat) and its threshold\n" +
			"as the board's next version for this CAS, so the change cannot be replayed later or\n" +
			"elsewhere. CAS needs the signatures of the current board's threshold of its keys, and of\n" +
			"at least a majority.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(members) == 0 || len(board) == 0 {
				return errors.New("--key (a member of the current board; repeat) and --board (repeat) are required")
			}
			pems, err := readPublicKeys("--board", board)
			if err != nil {
				return err
			}
			keys, err := readKeys("--key", members)
			if err != nil {
				return err
			}
			c, done, err := f.Client(cmd.Context(), s.Err)
			if err != nil {
				return err
			}
			defer done()
			res, err := c.ChangeBoard(cmd.Context(), pems, threshold, keys...)
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(s.Out, "the board is at version %d, %d of its keys approve a name: %s\n", res.Version, res.Threshold, strings.Join(res.Board, ", "))
			return nil
		},
	}
	f.AddFlags(cmd.Flags())
	cmd.Flags().StringArrayVar(&members, "key", nil, "a current board member's private key; repeat")
	cmd.Flags().StringArrayVar(&board, "board", nil, "a public key (PEM) of the new board; repeat")
	cmd.Flags().IntVar(&threshold, "threshold", 0, "how many of the new board's keys approve a new policy name or a wildcard (default a majority)")
	return cmd
}

// readKeys reads the private keys in files, named by flag in errors.
func readKeys(flag string, files []string) ([]*ecdsa.PrivateKey, error) {
	keys := make([]*ecdsa.PrivateKey, 0, len(files))
	for _, file := range files {
		key, err := policy.ReadKeyFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// readPublicKeys reads the PEM public keys in files, named by flag in
// errors.
func readPublicKeys(flag string, files []string) ([]string, error) {
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		if _, err := policy.ParsePublicKey(b); err != nil {
			return nil, fmt.Errorf("%s %s: %w", flag, f, err)
		}
		out = append(out, string(b))
	}
	return out, nil
}

// submitShare sends the owner's share to CAS and says what CAS needs
// still. With --cluster it goes to every running replica: replicas that
// start while the owners act would otherwise each hold some of the shares
// and none enough; the first to have enough recovers, and gives the
// others the seed.
func submitShare(ctx context.Context, s Streams, f *conn.Flags, sharesFile, keyFile string, force bool, accept *uint64) error {
	key, err := policy.ReadKeyFile(keyFile)
	if err != nil {
		return fmt.Errorf("the owner key: %w", err)
	}
	sh, err := casclient.OwnShare(sharesFile, key)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, keyFile)
	}
	req := &recoverRequest{share: sh, key: key, force: force, accept: accept}
	if f.Cluster == "" {
		res, err := shareWith(ctx, s, f, req)
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintln(s.Out, accepted("", res))
		return nil
	}
	cl, err := f.ClusterOf()
	if err != nil {
		return err
	}
	_, pods, err := cl.Replicas(ctx)
	if err != nil {
		return fmt.Errorf("--cluster %w", err)
	}
	var errs []error
	took := 0
	for _, pod := range pods {
		one := *f
		one.Pod = pod
		res, err := shareWith(ctx, s, &one, req)
		if err != nil {
			errs = append(errs, fmt.Errorf("replica %s: %w", pod, err))
			continue
		}
		took++
		_, _ = fmt.Fprintln(s.Out, accepted(pod+": ", res))
	}
	if took == 0 {
		return errors.Join(errs...)
	}
	for _, err := range errs {
		_, _ = fmt.Fprintf(s.Err, "warning: %v\n", err)
	}
	return nil
}

// recoverRequest is what an owner sends each replica: the share, and with
// accept that owner's acceptance of the older state's generation.
type recoverRequest struct {
	share  seed.Share
	key    *ecdsa.PrivateKey
	force  bool
	accept *uint64
}

// shareWith sends one share to the CAS (replica) f reaches.
func shareWith(ctx context.Context, s Streams, f *conn.Flags, r *recoverRequest) (*wire.RecoverResponse, error) {
	c, done, err := f.Client(ctx, s.Err)
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := c.RecoverAs(ctx, r.share, r.key, r.force, r.accept)
	if errors.Is(err, casclient.ErrNoStateMark) {
		return nil, fmt.Errorf("--accept-generation: %w: leave it out", err)
	}
	return res, err
}

func accepted(who string, res *wire.RecoverResponse) string {
	if res.Needed > 0 {
		return fmt.Sprintf("%sshare accepted: %d more needed", who, res.Needed)
	}
	return fmt.Sprintf("%sshare accepted: CAS is %s", who, res.State)
}

func newCASAttest(s Streams) *cobra.Command {
	var f conn.Flags
	var policyName, service, lasURL, out string
	var simulate bool
	var simKey string
	cmd := &cobra.Command{
		Use:   "attest (--cas URL|--cluster NS/NAME) [--cas-ca FILE] --policy P --service S (--sim|--las URL) --out DIR",
		Short: "Attest as a service and write its certificate, key, CAs, env and files into DIR",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if policyName == "" || service == "" || out == "" {
				return errors.New("--policy, --service and --out are required")
			}
			var q casclient.Quoter
			switch {
			case simulate && lasURL != "":
				return errors.New("--sim and --las: choose one")
			case simulate:
				// A CAS that pins simulation keys takes this quote only when
				// the key's public half is among them: name it explicitly.
				k, err := keyfile.LoadOrCreate(simKey)
				if err != nil {
					return fmt.Errorf("--sim-key: %w", err)
				}
				q = &sim.Quoter{Key: k}
			case lasURL != "":
				q = &lasclient.Client{URL: lasURL}
			default:
				return errors.New("evidence: --las URL (the node's LAS) or --sim (simulated, insecure)")
			}
			c, done, err := f.Client(cmd.Context(), s.Err)
			if err != nil {
				return err
			}
			defer done()
			res, err := c.Attest(cmd.Context(), policyName, service, q, out)
			if err != nil {
				return err
			}
			subject := "?"
			if block, _ := pem.Decode([]byte(res.Certificate)); block != nil {
				if leaf, err := x509.ParseCertificate(block.Bytes); err == nil {
					subject = leaf.Subject.String()
				}
			}
			_, _ = fmt.Fprintf(s.Out, "attested as %s/%s: certificate %q, key, CAs, %d env and %d files written to %s\n", policyName, service, subject, len(res.Env), len(res.Files), out)
			return nil
		},
	}
	f.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&policyName, "policy", "", "policy name")
	cmd.Flags().StringVar(&service, "service", "", "service in the policy")
	cmd.Flags().StringVar(&lasURL, "las", "", "the node's LAS, http://HOST:18766")
	cmd.Flags().BoolVar(&simulate, "sim", false, "simulated evidence (insecure; the policy must allow simulation)")
	cmd.Flags().StringVar(&simKey, "sim-key", "", "with --sim: the simulation key (PEM, made if missing) to sign with, whose public key CAS pins (cloister-cas --sim-keys, a CAS resource's spec.simulationKeys); default a new key each time, which no CAS takes")
	cmd.Flags().StringVar(&out, "out", "", "directory for the results")
	return cmd
}

func newCASRegister(s Streams) *cobra.Command {
	var f conn.Flags
	cmd := &cobra.Command{
		Use:   "register (--cas URL|--cluster NS/NAME) [--cas-ca FILE] RESOURCE.yaml",
		Short: "Register a SignedPolicy or EncryptedPolicy (cloister policy sign/encrypt output) with a CAS directly",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			req, err := policyres.Registration(data)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			c, done, err := f.Client(cmd.Context(), s.Err)
			if err != nil {
				return err
			}
			defer done()
			reg, err := c.RegisterPolicy(cmd.Context(), *req)
			if err != nil {
				return err
			}
			what := "registered"
			if reg.Unchanged {
				what = "unchanged"
			}
			_, _ = fmt.Fprintf(s.Out, "policy %s %s: version %d, digest %s\n", reg.Name, what, reg.Version, reg.Digest)
			return nil
		},
	}
	f.AddFlags(cmd.Flags())
	return cmd
}
