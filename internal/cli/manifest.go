package cli

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"

	"github.com/spf13/cobra"

	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/workload/generate"
)

// Files set, verify and recover keep in the workspace besides generate's.
const (
	seedSharesFile = "seedshares.json"
	rootCAFile     = "root-ca.pem"
	meshCAFile     = "mesh-ca.pem"
	verifyDir      = "verify"
)

func newSet(s Streams) *cobra.Command {
	var f casFlags
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
			doc, text, err := readWorkspaceManifest(dir)
			if err != nil {
				return err
			}
			if err := checkYAML(doc, paths); err != nil {
				return err
			}
			var key *ecdsa.PrivateKey
			if !doc.Immutable() {
				if ownerKey == "" {
					ownerKey = filepath.Join(dir, generate.WorkloadOwnerKeyFile)
				}
				if key, err = policy.ReadKeyFile(ownerKey); err != nil {
					return fmt.Errorf("--workload-owner-key: %w", err)
				}
			}
			c, done, err := f.client(cmd.Context(), s)
			if err != nil {
				return err
			}
			defer done()
			if err := initIfNeeded(cmd.Context(), s, c, &f, dir); err != nil {
				return err
			}
			signed := &policy.Signed{Policy: string(text)}
			if signed.Link, err = c.LinkFor(cmd.Context(), doc.Name, doc.Digest()); err != nil {
				return fmt.Errorf("asking CAS for the manifest's current version: %w", err)
			}
			if key != nil {
				if err := policy.Sign(signed, key); err != nil {
					return err
				}
			}
			if signed.Version == 1 {
				if err := approveName(cmd.Context(), c, signed, dir, boardKeys); err != nil {
					return err
				}
			}
			reg, err := c.RegisterPolicy(cmd.Context(), wire.PolicyRequest{Policy: signed.Policy, Link: signed.Link, Signatures: signed.Signatures})
			if err != nil {
				return fmt.Errorf("setting the manifest: %w", err)
			}
			if err := writeCAs(cmd.Context(), c, dir); err != nil {
				return err
			}
			what := "set"
			if reg.Unchanged {
				what = "unchanged"
			}
			_, _ = fmt.Fprintf(s.Out, "manifest %s %s: version %d, digest %s; %s and %s written\n", doc.Name, what, reg.Version, reg.Digest, rootCAFile, meshCAFile)
			return nil
		},
	}
	f.add(cmd)
	f.addInitToken(cmd)
	cmd.Flags().StringVar(&dir, "workspace", ".", "folder of manifest.yaml and the owner keys (cloister generate's)")
	cmd.Flags().StringVar(&ownerKey, "workload-owner-key", "", "the key that signs the manifest (default: workload-owner.pem of the workspace)")
	cmd.Flags().StringArrayVar(&boardKeys, "board-key", nil, "a key of CAS's board, which approves a new manifest name; repeat up to the board's threshold (default: the workspace's seedshare-owner.pem when it is on the board)")
	return cmd
}

// approveName adds the board's signatures to the first version of a
// manifest: with boardKeys, or else the workspace's seed share owner key
// when CAS has it on its board. Without enough of them CAS refuses the
// new name and says why.
func approveName(ctx context.Context, c *casclient.Client, signed *policy.Signed, dir string, boardKeys []string) error {
	for _, file := range boardKeys {
		key, err := policy.ReadKeyFile(file)
		if err != nil {
			return fmt.Errorf("--board-key: %w", err)
		}
		if err := policy.Sign(signed, key); err != nil {
			return err
		}
	}
	if len(boardKeys) > 0 {
		return nil
	}
	key, err := policy.ReadKeyFile(filepath.Join(dir, generate.SeedShareOwnerFile))
	if err != nil {
		return nil //nolint:nilerr // no seed share owner here: CAS says what the new name needs
	}
	pk, err := c.PublicKey(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(pk.Board, policy.Fingerprint(&key.PublicKey)) {
		return policy.Sign(signed, key)
	}
	return nil
}

func newVerify(s Streams) *cobra.Command {
	var f casFlags
	var dir string
	cmd := &cobra.Command{
		Use:   "verify (-c URL | --cluster NS/NAME) [trust flags] [--workspace DIR] [PATH...]",
		Short: "Attest CAS and check that it runs this manifest; write its CAs and manifest history to verify/",
		Long: "For data owners: trusts CAS by its evidence (or a pinned certificate), fetches the current\n" +
			"manifest and its whole history (signed by CAS, checked here), fails if the current one is not\n" +
			"the local manifest.yaml, and writes verify/: root-ca.pem, mesh-ca.pem, manifest.<i>.yaml\n" +
			"oldest first and, for the YAML given, the pod policies the manifest names.",
		RunE: func(cmd *cobra.Command, paths []string) error {
			doc, _, err := readWorkspaceManifest(dir)
			if err != nil {
				return err
			}
			c, done, err := f.client(cmd.Context(), s)
			if err != nil {
				return err
			}
			defer done()
			h, err := c.History(cmd.Context(), doc.Name)
			if err != nil {
				return fmt.Errorf("reading the manifest's history: %w", err)
			}
			key, err := policy.ParsePublicKey([]byte(h.HistoryKey))
			if err != nil {
				return fmt.Errorf("CAS's history key: %w", err)
			}
			if err := wire.VerifyHistory(h.Records, key); err != nil {
				return fmt.Errorf("CAS's history of %s does not verify: %w", doc.Name, err)
			}
			if len(h.Records) == 0 {
				return fmt.Errorf("CAS has no manifest %s: set it first (cloister set)", doc.Name)
			}
			current := h.Records[len(h.Records)-1]
			if current.Digest != doc.Digest() {
				return fmt.Errorf("CAS runs another manifest %s (version %d, digest %s) than %s (digest %s)", doc.Name, current.Version, current.Digest, generate.ManifestFile, doc.Digest())
			}
			out := filepath.Join(dir, verifyDir)
			if err := os.MkdirAll(out, 0o755); err != nil { //nolint:gosec // verify's output folder holds public CAs and history
				return err
			}
			if err := writeCAs(cmd.Context(), c, out); err != nil {
				return err
			}
			hidden := 0
			for i, r := range h.Records {
				if r.Policy == "" {
					hidden++ // read: owners; the digest above is all a data owner needs
					continue
				}
				if _, err := atomicfile.WriteIfChanged(filepath.Join(out, fmt.Sprintf("manifest.%d.yaml", i)), []byte(r.Policy), 0o644); err != nil {
					return err
				}
			}
			if hidden > 0 {
				_, _ = fmt.Fprintf(s.Err, "%d versions of manifest %s are readable only by its owners (read: owners): their documents are not written\n", hidden, doc.Name)
			}
			n, err := writePolicies(doc, paths, out)
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(s.Out, "CAS runs manifest %s version %d (digest %s); %d versions, %d pod policies written to %s\n", doc.Name, current.Version, current.Digest, len(h.Records), n, out)
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&dir, "workspace", ".", "folder of manifest.yaml (cloister generate's); verify/ is written there")
	return cmd
}

func newRecover(s Streams) *cobra.Command {
	var f casFlags
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
			return submitShare(cmd.Context(), s, &f, filepath.Join(dir, seedSharesFile), filepath.Join(dir, generate.SeedShareOwnerFile), force, accept)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&dir, "workspace", ".", "folder of seedshares.json and seedshare-owner.pem")
	cmd.Flags().BoolVar(&force, "force", false, "submit the share though a ready replica of this CAS could hand it the seed")
	cmd.Flags().Uint64Var(&acceptGeneration, "accept-generation", 0, "accept the older state CAS holds, at this generation (CAS names it)")
	return cmd
}

func readWorkspaceManifest(dir string) (*policy.Document, []byte, error) {
	path := filepath.Join(dir, generate.ManifestFile)
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("the manifest: %w (run cloister generate first)", err)
	}
	doc, err := policy.Parse(text)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc, text, nil
}

// checkYAML holds the YAML generate rewrote to the manifest.
func checkYAML(doc *policy.Document, paths []string) error {
	var workloads []generate.Workload
	err := eachYAML(paths, func(file string, data []byte) error {
		res, err := generate.Inspect(data)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		workloads = append(workloads, res.Workloads...)
		return nil
	})
	if err != nil {
		return err
	}
	return generate.CheckManifest(doc, workloads)
}

// writePolicies writes the pod policies of the YAML that the manifest
// names, as policy.<service>.json.
func writePolicies(doc *policy.Document, paths []string, out string) (int, error) {
	n := 0
	err := eachYAML(paths, func(file string, data []byte) error {
		res, err := generate.Inspect(data)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		for _, w := range res.Workloads {
			if !generate.InManifest(doc, w) {
				continue
			}
			n++
			if _, err := atomicfile.WriteIfChanged(filepath.Join(out, "policy."+w.Service+".json"), w.Policy, 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

func eachYAML(paths []string, do func(file string, data []byte) error) error {
	files, err := generate.YAMLFiles(paths)
	if err != nil {
		return err
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if err := do(file, data); err != nil {
			return err
		}
	}
	return nil
}

// initIfNeeded initialises an uninitialised CAS with the workspace's seed
// share owner as its one recovery owner.
func initIfNeeded(ctx context.Context, s Streams, c *casclient.Client, f *casFlags, dir string) error {
	pk, err := c.PublicKey(ctx)
	if err != nil {
		return err
	}
	if pk.State != string(wire.Uninitialized) {
		return nil
	}
	pub, _, err := generate.EnsureKey(filepath.Join(dir, generate.SeedShareOwnerFile))
	if err != nil {
		return fmt.Errorf("the seed share owner key: %w", err)
	}
	token, err := f.initToken(ctx)
	if err != nil {
		return fmt.Errorf("CAS is not initialised yet: %w", err)
	}
	path := filepath.Join(dir, seedSharesFile)
	if _, err := initCAS(ctx, c, &wire.InitRequest{RecoveryOwners: []string{pub}, Threshold: 1, Token: token}, path); err != nil {
		return fmt.Errorf("initialising CAS: %w", err)
	}
	_, _ = fmt.Fprintf(s.Err, "CAS initialised: its seed share, sealed to %s, is in %s; keep both to recover CAS\n", generate.SeedShareOwnerFile, path)
	return nil
}

func writeCAs(ctx context.Context, c *casclient.Client, dir string) error {
	cas, err := c.CAs(ctx)
	if err != nil {
		return fmt.Errorf("reading CAS's CAs: %w", err)
	}
	for name, pem := range map[string]string{rootCAFile: cas.RootCA, meshCAFile: cas.MeshCA} {
		if _, err := atomicfile.WriteIfChanged(filepath.Join(dir, name), []byte(pem), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// errNoShare is returned when a shares file holds none for a key.
var errNoShare = errors.New("holds no share for the key")
