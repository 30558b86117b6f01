package cli

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
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
	var dir, witnessPolicy string
	var witnessMaxAge time.Duration
	cmd := &cobra.Command{
		Use:   "verify (-c URL | --cluster NS/NAME) [trust flags] [--workspace DIR] [PATH...]",
		Short: "Attest CAS and check that it runs this manifest; write its CAs and manifest history to verify/",
		Long: "For data owners: trusts CAS by its evidence (or a pinned certificate), fetches the current\n" +
			"manifest and its whole history (signed by CAS, checked here), fails if the current one is not\n" +
			"the local manifest.yaml, and writes verify/: root-ca.pem, mesh-ca.pem, manifest.<i>.yaml\n" +
			"oldest first and, for the YAML given, the pod policies the manifest names.",
		RunE: func(cmd *cobra.Command, paths []string) error {
			w, err := workloadmanifest.Open(dir)
			if err != nil {
				return err
			}
			c, done, err := f.Client(cmd.Context(), s.Err)
			if err != nil {
				return err
			}
			defer done()
			wp, err := w.WitnessPolicy(witnessPolicy)
			if err != nil {
				return fmt.Errorf("--witness-policy: %w", err)
			}
			return workloadmanifest.Verify(cmd.Context(), c, w, casclient.LogPolicy{Witnesses: wp, MaxAge: witnessMaxAge}, paths, s.Out, s.Err)
		},
	}
	f.AddFlags(cmd.Flags())
	cmd.Flags().StringVar(&dir, "workspace", ".", "folder of manifest.yaml (cloister generate's); verify/ is written there")
	cmd.Flags().StringVar(&witnessPolicy, "witness-policy", "", "the witnesses whose cosignatures of CAS's transparency log are required (witness NAME KEY URL, group, quorum lines); default: "+workloadmanifest.WitnessPolicyFile+" in the workspace, when there")
	cmd.Flags().DurationVar(&witnessMaxAge, "witness-max-age", 2*time.Hour, "with a witness policy: how old its cosignatures may be (CAS asks for new ones every half hour; a rolled-back CAS gets none); 0: any age")
	return cmd
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
