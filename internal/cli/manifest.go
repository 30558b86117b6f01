package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/witness"
	"github.com/cloister-cc/cloister/internal/workload/audit"
	"github.com/cloister-cc/cloister/internal/workload/generate"
	workloadmanifest "github.com/cloister-cc/cloister/internal/workload/manifest"
)

func newSet(s Streams) *cobra.Command {
	var f conn.Flags
	var dir, ownerKey string
	var boardKeys []string
	cmd := &cobra.Command{
		Use:   "set (-c URL | --cluster NS/NAME) [trust flags] [--workspace DIR] PATH...",
		Short: "Check the YAML against manifest.yaml, attest CAS and set the manifest there",
		Long: "Checks that the pod policies of the YAML generate rewrote are the manifest's, trusts CAS\n" +
			"(by its evidence or a pinned certificate), initialises it on first use with the seed share\n" +
			"owner's key (the sealed share is written to seedshares.json), registers the manifest\n" +
			"signed by the workload owner and writes root-ca.pem and mesh-ca.pem. Pods waiting in\n" +
			"their initializer start once it is set. A new manifest name needs CAS's board too:\n" +
			"--board-key, or the seed share owner's key when it is on the board (it is when set\n" +
			"initialised CAS).",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, paths []string) error {
			w, err := workloadmanifest.Open(dir)
			if err != nil {
				return err
			}
			set := workloadmanifest.Set{Workspace: w, InitToken: f.InitToken, Out: s.Out, Err: s.Err}
			if !w.Doc.Immutable() {
				if ownerKey == "" {
					ownerKey = filepath.Join(dir, generate.WorkloadOwnerKeyFile)
				}
				if set.Owner, err = policy.ReadKeyFile(ownerKey); err != nil {
					return fmt.Errorf("--workload-owner-key: %w", err)
				}
			}
			if set.Board, err = readKeys("--board-key", boardKeys); err != nil {
				return err
			}
			// Before CAS is reached: a mismatch costs no connection.
			if err := w.CheckYAML(paths); err != nil {
				return err
			}
			c, done, err := f.Client(cmd.Context(), s.Err)
			if err != nil {
				return err
			}
			defer done()
			return set.Run(cmd.Context(), c)
		},
	}
	f.AddFlags(cmd.Flags())
	f.AddInitTokenFlag(cmd.Flags())
	cmd.Flags().StringVar(&dir, "workspace", ".", "folder of manifest.yaml and the owner keys (cloister generate's)")
	cmd.Flags().StringVar(&ownerKey, "workload-owner-key", "", "the key that signs the manifest (default: workload-owner.pem of the workspace)")
	cmd.Flags().StringArrayVar(&boardKeys, "board-key", nil, "a key of CAS's board, which approves a new manifest name; repeat up to the board's threshold (default: the workspace's seedshare-owner.pem when it is on the board)")
	return cmd
}

func newVerify(s Streams) *cobra.Command {
	var f conn.Flags
	var dir, witnessPolicy, bundle, offline, at string
	var witnessMaxAge time.Duration
	cmd := &cobra.Command{
		Use:   "verify (-c URL | --cluster NS/NAME) [trust flags] [--workspace DIR] [--bundle FILE] [PATH...] | verify --offline FILE [trust flags]",
		Short: "Attest CAS and check that it runs this manifest; write its CAs and manifest history to verify/, and an auditor bundle",
		Long: "For data owners: trusts CAS by its evidence (or a pinned certificate), fetches the current\n" +
			"manifest and its whole history (signed by CAS, checked here), fails if the current one is not\n" +
			"the local manifest.yaml, checks every version is in CAS's transparency log at a checkpoint that\n" +
			"extends the one the workspace saw (and carries the witness policy's cosignatures), and writes\n" +
			"verify/: root-ca.pem, mesh-ca.pem, manifest.<i>.yaml oldest first and, for the YAML given,\n" +
			"the pod policies the manifest names. --bundle also writes an auditor bundle: CAS's statement\n" +
			"over a fresh nonce with its evidence, the history, each version's inclusion proof and the\n" +
			"consistency proof from the checkpoint seen before. --offline re-checks a bundle anywhere,\n" +
			"without the cluster, against the trust flags, and prints the verdict per claim.",
		RunE: func(cmd *cobra.Command, paths []string) error {
			if offline != "" {
				return verifyOffline(cmd, s, &f, offline, dir, witnessPolicy, witnessMaxAge, at)
			}
			w, err := workloadmanifest.Open(dir)
			if err != nil {
				return err
			}
			wp, err := w.WitnessPolicy(witnessPolicy)
			if err != nil {
				return fmt.Errorf("--witness-policy: %w", err)
			}
			o := workloadmanifest.VerifyOptions{Log: casclient.LogPolicy{Witnesses: wp, MaxAge: witnessMaxAge}, Bundle: bundle}
			c, done, err := f.Client(cmd.Context(), s.Err)
			if err != nil {
				return err
			}
			defer done()
			if bundle != "" {
				if o.Expect, err = f.Expect(s.Err); err != nil {
					return fmt.Errorf("--bundle: %w", err)
				}
			}
			return workloadmanifest.Verify(cmd.Context(), c, w, o, paths, s.Out, s.Err)
		},
	}
	f.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&dir, "workspace", ".", "folder of manifest.yaml (cloister generate's); verify/ is written there")
	cmd.Flags().StringVar(&witnessPolicy, "witness-policy", "", "the witnesses whose cosignatures of CAS's transparency log are required (witness NAME KEY URL, group, quorum lines); default: "+workloadmanifest.WitnessPolicyFile+" in the workspace, when there")
	cmd.Flags().DurationVar(&witnessMaxAge, "witness-max-age", 2*time.Hour, "with a witness policy: how old its cosignatures may be (CAS asks for new ones every half hour; a rolled-back CAS gets none); 0: any age")
	cmd.Flags().StringVar(&bundle, "bundle", "", "also write an auditor bundle to this file (needs --cas-identity, or --insecure-simulated-cas with --cas-sim-key)")
	cmd.Flags().StringVar(&offline, "offline", "", "re-check this auditor bundle without any connection, and print the verdict per claim")
	cmd.Flags().StringVar(&at, "at", "", "with --offline: the time (RFC 3339) CAS's evidence is judged at; default: the time of CAS's statement")
	return cmd
}

// verifyOffline re-checks an auditor bundle.
func verifyOffline(cmd *cobra.Command, s Streams, f *conn.Flags, file, dir, witnessPolicy string, maxAge time.Duration, at string) error {
	if f.URL != "" || f.Cluster != "" {
		return errors.New("--offline connects to nothing: drop --cas and --cluster")
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--offline: %w", err)
	}
	o := audit.Options{MaxAge: maxAge}
	if o.Expect, err = f.Expect(s.Err); err != nil {
		return err
	}
	if at != "" {
		if o.At, err = time.Parse(time.RFC3339, at); err != nil {
			return fmt.Errorf("--at: %w", err)
		}
	}
	if witnessPolicy != "" {
		if o.Witnesses, err = witness.ReadPolicy(witnessPolicy); err != nil {
			return fmt.Errorf("--witness-policy: %w", err)
		}
	}
	if cmd.Flags().Changed("workspace") {
		w, err := workloadmanifest.Open(dir)
		if err != nil {
			return err
		}
		o.Digest = w.Doc.Digest()
		if o.Witnesses == nil {
			if o.Witnesses, err = w.WitnessPolicy(""); err != nil {
				return err
			}
		}
	}
	b, err := audit.Parse(raw)
	if err != nil {
		_, _ = fmt.Fprintf(s.Out, "FAIL bundle: %v\n", err)
		return fmt.Errorf("%s does not verify: bundle", file)
	}
	var failed []string
	for _, c := range audit.Check(b, o) {
		if c.Err != nil {
			failed = append(failed, c.Name)
			_, _ = fmt.Fprintf(s.Out, "FAIL %s: %v\n", c.Name, c.Err)
			continue
		}
		_, _ = fmt.Fprintf(s.Out, "PASS %s: %s\n", c.Name, c.Detail)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s does not verify: %s", file, strings.Join(failed, ", "))
	}
	_, _ = fmt.Fprintf(s.Out, "verdict: %s holds every claim\n", file)
	return nil
}

func newRecover(s Streams) *cobra.Command {
	var f conn.Flags
	var dir string
	var force bool
	var acceptGeneration uint64
	cmd := &cobra.Command{
		Use:   "recover (-c URL | --cluster NS/NAME) [trust flags] [--workspace DIR] [--force] [--accept-generation G]",
		Short: "Recover a restarted CAS with the seed share owner's share (seedshares.json, seedshare-owner.pem)",
		Long: "After CAS restarts without its root secret it waits in recovery mode and workloads wait in\n" +
			"their initializers. The seed share owner's share, made by cloister set, unseals it; restart\n" +
			"the workloads afterwards.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var accept *uint64
			if cmd.Flags().Changed("accept-generation") {
				accept = &acceptGeneration
			}
			return submitShare(cmd.Context(), s, &f, filepath.Join(dir, workloadmanifest.SeedSharesFile), filepath.Join(dir, generate.SeedShareOwnerFile), force, accept)
		},
	}
	f.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&dir, "workspace", ".", "folder of seedshares.json and seedshare-owner.pem")
	cmd.Flags().BoolVar(&force, "force", false, "submit the share though a ready replica of this CAS could hand it the seed")
	cmd.Flags().Uint64Var(&acceptGeneration, "accept-generation", 0, "accept the older state CAS holds, at this generation (CAS names it)")
	return cmd
}
