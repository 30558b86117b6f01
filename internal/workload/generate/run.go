package generate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/workload/imagepin"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// RunConfig is one run of generate over a workspace: what the user asked
// for, already read and checked.
type RunConfig struct {
	// Platform and Reference are the platform's name and, for snp and
	// tdx, its reference values (nil for sim).
	Platform  runtimeclass.Platform
	Reference *refvalues.File
	// Workspace holds the manifest, the owner keys and the image caches.
	Workspace string
	// Paths are YAML files and folders rewritten in place; "-" reads In
	// and writes Out.
	Paths []string
	// Options are the rewrite's options; Run fills in the images' pins,
	// the runtime class, its overhead and the owners' pin.
	Options Options
	// NoMeshImage, when Options.MeshImage is empty, says why, for a pod
	// that needs the mesh.
	NoMeshImage error
	// Offline asks no registry: images must name digests or be cached.
	Offline bool
	// AddedOwnerKeys are PEM public keys that may update the manifest
	// besides the workspace's workload owner; DisableUpdates makes the
	// manifest have no owners at all.
	AddedOwnerKeys []string
	DisableUpdates bool
	// Overhead is the memory every pod's VM pays beside its containers,
	// in MiB, for the runtime class Run settles on.
	Overhead func(ctx context.Context, class string) (int64, error)
	// Version names the default runtime class.
	Version string

	In       io.Reader
	Out, Err io.Writer
}

// Run makes the pods of the YAML in cfg.Paths confidential, writes the
// workspace's manifest of their policies (making its owner keys on first
// use), and reports each workload on cfg.Err.
func Run(ctx context.Context, cfg RunConfig) error {
	if cfg.DisableUpdates && len(cfg.AddedOwnerKeys) > 0 {
		return errors.New("a manifest without updates has no owners to add: choose one")
	}
	manifest := Manifest{Name: cfg.Options.Policy, Platform: cfg.Platform, Reference: cfg.Reference}
	if err := os.MkdirAll(cfg.Workspace, 0o755); err != nil { //nolint:gosec // generate's output folder holds manifests, read by the user's tools
		return fmt.Errorf("the workspace: %w", err)
	}
	pinner := &imagepin.Pinner{Offline: cfg.Offline, Cache: filepath.Join(cfg.Workspace, DigestCacheFile)}
	configs := &imagepin.Configs{Offline: cfg.Offline, Cache: filepath.Join(cfg.Workspace, ConfigCacheFile)}
	opts := cfg.Options
	var err error
	if opts.InitializerImage, err = pinner.Resolve(ctx, opts.InitializerImage); err != nil {
		return fmt.Errorf("the initializer image: %w", err)
	}
	opts.Resolver, opts.Configs = pinner, configs
	opts.SGX = cfg.Platform == runtimeclass.SGX
	opts.GuestEvidence = cfg.Platform != runtimeclass.Sim && !opts.SGX
	if !opts.SGX {
		if opts.RuntimeClass == "" {
			opts.RuntimeClass = runtimeclass.ClassName(cfg.Platform, cfg.Version)
		}
		if opts.OverheadMiB, err = cfg.Overhead(ctx, opts.RuntimeClass); err != nil {
			return err
		}
	}
	if !cfg.DisableUpdates {
		if manifest.OwnerKeys, err = ensureOwners(cfg); err != nil {
			return err
		}
	}
	if opts.PolicyOwners, err = PinnedOwners(manifest.OwnerKeys); err != nil {
		return err
	}
	if len(manifest.OwnerKeys) > 0 {
		opts.PolicyOwnerThreshold = strconv.Itoa(manifest.OwnerThreshold())
	}
	seedOwner := filepath.Join(cfg.Workspace, SeedShareOwnerFile)
	if _, made, err := EnsureKey(seedOwner); err != nil {
		return fmt.Errorf("the seed share owner key: %w", err)
	} else if made {
		_, _ = fmt.Fprintf(cfg.Err, "made %s: it recovers CAS (cloister recover); keep it safe\n", seedOwner)
		warnExposed(cfg.Err, seedOwner)
	}

	all := &Result{}
	manifestPath := filepath.Join(cfg.Workspace, ManifestFile)
	for _, p := range cfg.Paths {
		if p == "-" {
			if err := rewriteStream(ctx, cfg.In, cfg.Out, opts, all); err != nil {
				return fmt.Errorf("standard input: %w", withMeshHint(err, cfg.NoMeshImage))
			}
			continue
		}
		files, err := YAMLFiles([]string{p})
		if err != nil {
			return err
		}
		for _, file := range files {
			if same, _ := sameFile(file, manifestPath); same {
				continue
			}
			if err := rewriteFile(ctx, file, opts, all); err != nil {
				return fmt.Errorf("%s: %w", file, withMeshHint(err, cfg.NoMeshImage))
			}
		}
	}
	if err := pinner.Save(); err != nil {
		return err
	}
	if err := configs.Save(); err != nil {
		return err
	}
	if len(all.Workloads) == 0 {
		return errors.New("no pod template with runtimeClassName " + Placeholder + " found: mark the pods to make confidential")
	}
	if opts.SGX {
		return runSGX(cfg, opts, manifest, all)
	}
	doc, err := manifest.Document(all.Workloads, all.Services)
	if err != nil {
		return err
	}
	if err := WriteManifest(manifestPath, doc); err != nil {
		return err
	}
	for _, w := range all.Workloads {
		_, _ = fmt.Fprintf(cfg.Err, "%s %s/%s: policy %s, VM memory %dMi\n", w.Kind, w.Namespace, w.Name, w.Digest[:16], w.MemoryMiB)
		for _, warn := range w.Warnings {
			_, _ = fmt.Fprintf(cfg.Err, "  warning: %s\n", warn)
		}
	}
	if cfg.Platform == runtimeclass.Sim {
		_, _ = fmt.Fprintln(cfg.Err, "reference values sim: the manifest accepts simulated evidence (insecure: no TEE vouches for the pods)")
	}
	_, _ = fmt.Fprintf(cfg.Err, "wrote %s (%d services)\n", manifestPath, len(doc.Services))
	return nil
}

// ensureOwners are the manifest's owner keys: the workspace's workload
// owner (made on first run) and the added ones.
func ensureOwners(cfg RunConfig) ([]string, error) {
	path := filepath.Join(cfg.Workspace, WorkloadOwnerKeyFile)
	pub, made, err := EnsureKey(path)
	if err != nil {
		return nil, fmt.Errorf("the workload owner key: %w", err)
	}
	if made {
		_, _ = fmt.Fprintf(cfg.Err, "made %s: it signs manifest updates (cloister set)\n", path)
		warnExposed(cfg.Err, path)
	}
	keys := []string{pub}
	for _, k := range cfg.AddedOwnerKeys {
		keys = append(keys, strings.TrimSpace(k)+"\n")
	}
	return keys, nil
}

// PinnedOwners is the initializers' pin of the manifest's owners
// (initenv.EnvPolicyOwners): their fingerprints, or NoOwners.
func PinnedOwners(keys []string) (string, error) {
	if len(keys) == 0 {
		return initenv.NoOwners, nil
	}
	fps := make([]string, 0, len(keys))
	for _, k := range keys {
		pub, err := keyfile.ParsePublic([]byte(k))
		if err != nil {
			return "", err
		}
		fps = append(fps, policy.Fingerprint(pub))
	}
	return strings.Join(fps, ","), nil
}

// Explain writes what the guest allows each confidential pod of the
// generated YAML in paths.
func Explain(w io.Writer, paths []string) error {
	return EachYAML(paths, func(file string, in []byte) error {
		res, err := Inspect(in)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		for _, wl := range res.Workloads {
			if wl.Enclave != nil {
				_, _ = fmt.Fprintf(w, "%s %s/%s runs an SGX enclave in container %s under its node's runtime: no guest policy applies; "+
					"its enclave's MRENCLAVE, pinned in the CAS manifest, is its identity, and its Gramine manifest says what it runs\n\n", wl.Kind, wl.Namespace, wl.Name, wl.Enclave.Container)
				continue
			}
			var p podpolicy.Policy
			if err := json.Unmarshal(wl.Policy, &p); err != nil {
				return fmt.Errorf("%s: %s %s/%s: %w", file, wl.Kind, wl.Namespace, wl.Name, err)
			}
			_, _ = fmt.Fprintf(w, "%s %s/%s (policy %s) in its confidential VM, the guest allows:\n", wl.Kind, wl.Namespace, wl.Name, wl.Digest)
			for _, line := range strings.SplitAfter(strings.TrimSuffix(p.Explain(), "\n"), "\n") {
				_, _ = fmt.Fprint(w, "  "+line)
			}
			_, _ = fmt.Fprintln(w)
		}
		return nil
	})
}

func rewriteFile(ctx context.Context, file string, opts Options, all *Result) error {
	in, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	out, found, err := rewriteInto(ctx, in, opts, all)
	if err != nil || found == 0 {
		return err // with nothing of ours, the file stays as written
	}
	info, err := os.Stat(file)
	if err != nil {
		return err
	}
	_, err = atomicfile.WriteIfChanged(file, out, info.Mode().Perm())
	return err
}

func rewriteStream(ctx context.Context, r io.Reader, w io.Writer, opts Options, all *Result) error {
	in, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	out, _, err := rewriteInto(ctx, in, opts, all)
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// rewriteInto rewrites one stream, adds what it found to all and says
// how many workloads it rewrote.
func rewriteInto(ctx context.Context, in []byte, opts Options, all *Result) ([]byte, int, error) {
	out, res, err := Rewrite(ctx, in, opts)
	if err != nil {
		return nil, 0, err
	}
	all.Workloads = append(all.Workloads, res.Workloads...)
	all.Services = append(all.Services, res.Services...)
	return out, len(res.Workloads), nil
}

func sameFile(a, b string) (bool, error) {
	ia, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	ib, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(ia, ib), nil
}

// warnExposed warns when a private key was written into a git work tree
// that does not ignore it.
func warnExposed(w io.Writer, key string) {
	if tree := ExposedKey(key); tree != "" {
		_, _ = fmt.Fprintf(w, "warning: %s is a private key inside the git work tree %s, which does not ignore it: "+
			"add %s to its .gitignore before the next commit\n", key, tree, filepath.Base(key))
	}
}

// withMeshHint says why there is no mesh image.
func withMeshHint(err, why error) error {
	if why != nil && errors.Is(err, ErrNoMeshImage) {
		return fmt.Errorf("%w: %w", err, why)
	}
	return err
}

// runSGX writes each SGX workload's Gramine manifest lines into the
// workspace and, once the enclave's reference values are given, the CAS
// manifest that pins it. One values file is one enclave: each service's
// enclave measures its own service name, so two workloads never share one.
func runSGX(cfg RunConfig, opts Options, manifest Manifest, all *Result) error {
	for _, w := range all.Workloads {
		lines, err := GramineManifest(w, opts)
		if err != nil {
			return err
		}
		file := filepath.Join(cfg.Workspace, GramineFile(w.Service))
		if _, err := atomicfile.WriteIfChanged(file, lines, 0o644); err != nil {
			return err
		}
		_, _ = fmt.Fprintf(cfg.Err, "%s %s/%s: %s; its Gramine manifest needs %s\n", w.Kind, w.Namespace, w.Name, w.Enclave, file)
	}
	if manifest.Reference == nil || manifest.Reference.SGX == nil {
		_, _ = fmt.Fprintln(cfg.Err, "no enclave identity given, so no CAS manifest written: add the lines to the Gramine manifest, sign the enclave, "+
			"and run generate again with the values of cloister reference-values compute --platform sgx --sigstruct")
		return nil
	}
	if len(all.Workloads) > 1 {
		return fmt.Errorf("sgx reference values pin one enclave, and the YAML has %d SGX workloads, each with an enclave of its own: generate each with its values, in a workspace of its own", len(all.Workloads))
	}
	doc, err := manifest.Document(all.Workloads, all.Services)
	if err != nil {
		return err
	}
	path := filepath.Join(cfg.Workspace, ManifestFile)
	if err := WriteManifest(path, doc); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(cfg.Err, "wrote %s (%d services, MRENCLAVE %s)\n", path, len(doc.Services), manifest.Reference.SGX.MRENCLAVE)
	return nil
}
