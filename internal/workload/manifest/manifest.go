// Package manifest owns a workspace's manifest at CAS after generate wrote
// it: setting it (initialising CAS on first use), and verifying, for data
// owners, that CAS runs it. The CLI's set and verify call it.
package manifest

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/cas/witness"
	"github.com/cloister-cc/cloister/internal/workload/audit"
	"github.com/cloister-cc/cloister/internal/workload/generate"
)

// Files set, verify and recover keep in the workspace besides generate's.
const (
	SeedSharesFile = "seedshares.json"
	RootCAFile     = "root-ca.pem"
	MeshCAFile     = "mesh-ca.pem"
	VerifyDir      = "verify"
	// LogCheckpointFile is the largest checkpoint of CAS's transparency
	// log the workspace has seen: verify refuses a smaller or forked one.
	LogCheckpointFile = "log-checkpoint"
	// WitnessPolicyFile, when the workspace has it, names the witnesses
	// whose cosignatures of CAS's log verify requires
	// (witness.ParsePolicy).
	WitnessPolicyFile = "witness-policy"
)

// Workspace is a workspace's manifest, read once: its document and the
// text its owners sign.
type Workspace struct {
	Dir  string
	Doc  *policy.Document
	Text []byte
}

// Open reads the workspace's manifest.
func Open(dir string) (*Workspace, error) {
	path := filepath.Join(dir, generate.ManifestFile)
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the manifest: %w (run cloister generate first)", err)
	}
	doc, err := policy.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Workspace{Dir: dir, Doc: doc, Text: text}, nil
}

// Set is one setting of a workspace's manifest at CAS; the caller has
// checked the workspace against its YAML (CheckYAML) before reaching CAS.
type Set struct {
	*Workspace
	// Owner signs the manifest; nil for an immutable one.
	Owner *ecdsa.PrivateKey
	// Board approves a new manifest name; without it, the workspace's
	// seed share owner does when CAS has it on its board.
	Board []*ecdsa.PrivateKey
	// InitToken gives CAS's one-time init token, asked only when CAS is
	// not initialised yet.
	InitToken func(ctx context.Context) (string, error)
	Out, Err  io.Writer
}

// Run initialises CAS with the workspace's seed share owner when it is not
// yet, registers the manifest as CAS's next version of it and writes CAS's
// CAs.
func (s Set) Run(ctx context.Context, c *casclient.Client) error {
	doc := s.Doc
	if err := s.initIfNeeded(ctx, c); err != nil {
		return err
	}
	signed := &policy.Signed{Policy: string(s.Text)}
	var err error
	if signed.Link, err = c.LinkFor(ctx, doc.Name, doc.Digest()); err != nil {
		return fmt.Errorf("asking CAS for the manifest's current version: %w", err)
	}
	if s.Owner != nil {
		if err := policy.Sign(signed, s.Owner); err != nil {
			return err
		}
	}
	if signed.Version == 1 {
		if err := s.approveName(ctx, c, signed); err != nil {
			return err
		}
	}
	reg, err := c.RegisterPolicy(ctx, wire.PolicyRequest{Policy: signed.Policy, Link: signed.Link, Signatures: signed.Signatures})
	if err != nil {
		return fmt.Errorf("setting the manifest: %w", err)
	}
	if err := WriteCAs(ctx, c, s.Dir); err != nil {
		return err
	}
	what := "set"
	if reg.Unchanged {
		what = "unchanged"
	}
	_, _ = fmt.Fprintf(s.Out, "manifest %s %s: version %d, digest %s; %s and %s written\n", doc.Name, what, reg.Version, reg.Digest, RootCAFile, MeshCAFile)
	return nil
}

// approveName adds the board's signatures to the first version of a
// manifest: the Board's, or else the workspace's seed share owner's when
// CAS has it on its board. Without enough of them CAS refuses the new
// name and says why.
func (s Set) approveName(ctx context.Context, c *casclient.Client, signed *policy.Signed) error {
	for _, key := range s.Board {
		if err := policy.Sign(signed, key); err != nil {
			return err
		}
	}
	if len(s.Board) > 0 {
		return nil
	}
	key, err := policy.ReadKeyFile(filepath.Join(s.Dir, generate.SeedShareOwnerFile))
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

// initIfNeeded initialises an uninitialised CAS with the workspace's seed
// share owner as its one recovery owner.
func (s Set) initIfNeeded(ctx context.Context, c *casclient.Client) error {
	pk, err := c.PublicKey(ctx)
	if err != nil {
		return err
	}
	if pk.State != string(wire.Uninitialized) {
		return nil
	}
	pub, _, err := generate.EnsureKey(filepath.Join(s.Dir, generate.SeedShareOwnerFile))
	if err != nil {
		return fmt.Errorf("the seed share owner key: %w", err)
	}
	token, err := s.InitToken(ctx)
	if err != nil {
		return fmt.Errorf("CAS is not initialised yet: %w", err)
	}
	path := filepath.Join(s.Dir, SeedSharesFile)
	if _, err := c.InitInto(ctx, &wire.InitRequest{RecoveryOwners: []string{pub}, Threshold: 1, Token: token}, path); err != nil {
		return fmt.Errorf("initialising CAS: %w", err)
	}
	_, _ = fmt.Fprintf(s.Err, "CAS initialised: its seed share, sealed to %s, is in %s; keep both to recover CAS\n", generate.SeedShareOwnerFile, path)
	return nil
}

// VerifyOptions are what verify requires beyond CAS's evidence, and
// where it writes an auditor bundle.
type VerifyOptions struct {
	// Log is what CAS's transparency log must show.
	Log casclient.LogPolicy
	// Bundle, when set, is the file an auditor bundle is written to,
	// with CAS's statement checked against Expect.
	Bundle string
	Expect casclient.Expect
}

// Verify checks, for a data owner, that CAS runs the workspace's manifest:
// it fetches the manifest's whole history (signed by CAS, checked here) and
// writes verify/: CAS's CAs, every version readable to everyone, and the
// pod policies of the YAML in paths that the manifest names.
func Verify(ctx context.Context, c *casclient.Client, w *Workspace, o VerifyOptions, paths []string, out, errw io.Writer) error {
	doc, dir := w.Doc, w.Dir
	h, err := c.History(ctx, doc.Name)
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
	// Every version in CAS's transparency log, at a checkpoint that
	// extends the one this workspace saw last.
	memory := filepath.Join(dir, LogCheckpointFile)
	remembered, err := os.ReadFile(memory)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	cp, err := c.Logged(ctx, memory, o.Log, h.Records)
	if err != nil {
		return fmt.Errorf("CAS's transparency log: %w", err)
	}
	current := h.Records[len(h.Records)-1]
	if current.Digest != doc.Digest() {
		return fmt.Errorf("CAS runs another manifest %s (version %d, digest %s) than %s (digest %s)", doc.Name, current.Version, current.Digest, generate.ManifestFile, doc.Digest())
	}
	folder := filepath.Join(dir, VerifyDir)
	if err := os.MkdirAll(folder, 0o755); err != nil { //nolint:gosec // verify's output folder holds public CAs and history
		return err
	}
	if err := WriteCAs(ctx, c, folder); err != nil {
		return err
	}
	hidden := 0
	for i, r := range h.Records {
		if r.Policy == "" {
			hidden++ // read: owners; the digest above is all a data owner needs
			continue
		}
		if _, err := atomicfile.WriteIfChanged(filepath.Join(folder, fmt.Sprintf("manifest.%d.yaml", i)), []byte(r.Policy), 0o644); err != nil {
			return err
		}
	}
	if hidden > 0 {
		_, _ = fmt.Fprintf(errw, "%d versions of manifest %s are readable only by its owners (read: owners): their documents are not written\n", hidden, doc.Name)
	}
	n, err := writePolicies(doc, paths, folder)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "CAS runs manifest %s version %d (digest %s); %d versions, each in CAS's transparency log (size %d); %d pod policies written to %s\n",
		doc.Name, current.Version, current.Digest, len(h.Records), cp.Size, n, folder)
	if o.Bundle == "" {
		return nil
	}
	b, err := audit.Build(ctx, c, o.Expect, doc.Name, h.Records, remembered)
	if err != nil {
		return fmt.Errorf("the auditor bundle: %w", err)
	}
	raw, err := b.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.Bundle, raw, 0o644); err != nil { //nolint:gosec // a bundle holds only what anyone may read
		return fmt.Errorf("the auditor bundle: %w", err)
	}
	_, _ = fmt.Fprintf(out, "auditor bundle written to %s (%d bytes): cloister verify --offline %s re-checks it without the cluster\n", o.Bundle, len(raw), o.Bundle)
	return nil
}

// WitnessPolicy is the workspace's witness policy (WitnessPolicyFile),
// or file when not ""; nil when neither is there.
func (w *Workspace) WitnessPolicy(file string) (*witness.Policy, error) {
	if file == "" {
		file = filepath.Join(w.Dir, WitnessPolicyFile)
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	return witness.ReadPolicy(file)
}

// CheckYAML holds the YAML generate rewrote to the manifest.
func (w *Workspace) CheckYAML(paths []string) error {
	doc := w.Doc
	var workloads []generate.Workload
	err := generate.EachYAML(paths, func(file string, data []byte) error {
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
	err := generate.EachYAML(paths, func(file string, data []byte) error {
		res, err := generate.Inspect(data)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		for _, w := range res.Workloads {
			if w.Enclave != nil || !generate.InManifest(doc, w) {
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

// WriteCAs writes CAS's root and mesh CAs into dir.
func WriteCAs(ctx context.Context, c *casclient.Client, dir string) error {
	cas, err := c.CAs(ctx)
	if err != nil {
		return fmt.Errorf("reading CAS's CAs: %w", err)
	}
	for name, pem := range map[string]string{RootCAFile: cas.RootCA, MeshCAFile: cas.MeshCA} {
		if _, err := atomicfile.WriteIfChanged(filepath.Join(dir, name), []byte(pem), 0o644); err != nil {
			return err
		}
	}
	return nil
}
