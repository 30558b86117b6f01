// Package initializer is the init container of confidential pods: it
// attests the pod to CAS with its confidential VM's own evidence (snp,
// tdx) or its node's LAS's (sim), and trusts CAS by
// CAS's own evidence, retries until CAS knows the pod (the manifest is
// set, CAS is recovered), writes the pod's certificate, key, CAs and
// secrets into the shared in-memory volume and exits, so the app
// containers start with them. In an SGX enclave it is the premain
// instead (premain.go): it attests with the enclave's own evidence,
// writes the results inside the enclave and becomes the application.
package initializer

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/base/strictjson"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/cas/witness"
	"github.com/cloister-cc/cloister/internal/las/lasclient"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// Config is what generate wrote into the initializer's environment; it
// is part of the pod's policy, so a host cannot point it elsewhere.
type Config struct {
	// CAS is HOST:PORT of CAS's client port.
	CAS string
	// Expect is the attestation policy CAS's evidence must meet (JSON).
	Expect string
	// SimKey is the PEM public key a simulated CAS signs its evidence
	// with: required when Expect allows simulation, since any key signs
	// a simulated quote.
	SimKey string
	// Policy and Service name the pod in CAS's manifest.
	Policy, Service string
	// PolicyOwners pins the manifest's owners (fingerprints,
	// comma-separated) or says it has none (initenv.NoOwners), and
	// PolicyOwnerThreshold how many of them sign a change (for owners).
	PolicyOwners, PolicyOwnerThreshold string
	// LAS is the node's LAS URL (with the LAS evidence).
	LAS string
	// Evidence is where the pod's evidence comes from: initenv.EvidenceLAS
	// (or empty), initenv.EvidenceGuest, its confidential VM's own at
	// Guest's paths, or initenv.EvidenceSGX, its SGX enclave's own at
	// Guest.Gramine (with LAS, when set, quoting the enclave's REPORT).
	Evidence string
	Guest    produce.Paths
	// TestRoots is PEM test roots CAS's evidence may chain to (insecure).
	TestRoots string
	// Out is the folder for the results (under the shared volume).
	Out string
	// Retry bounds the wait between attempts; defaults 1s to 30s.
	MinRetry, MaxRetry time.Duration
	// WitnessPolicy (text) and WitnessMaxAge (a duration, default 2h),
	// when set, are the cosignatures of CAS's transparency log the pod
	// requires; LogMemory, when set, the file that remembers the largest
	// checkpoint it saw. With either, the pod's policy version must be in
	// the log.
	WitnessPolicy, WitnessMaxAge, LogMemory string
	// Exec, when set, is the application the initializer becomes once
	// attested (a premain: argv, the program first), with the policy's env
	// added to its environment, in the same process and so the same
	// enclave: the secrets never leave it.
	Exec []string
}

// Validate names the missing settings.
func (c *Config) Validate() error {
	switch c.Evidence {
	case "", initenv.EvidenceLAS, initenv.EvidenceGuest, initenv.EvidenceSGX:
	default:
		return fmt.Errorf("%s=%q: use %s, %s or %s (cloister generate sets it)", initenv.EnvEvidence, c.Evidence, initenv.EvidenceLAS, initenv.EvidenceGuest, initenv.EvidenceSGX)
	}
	las := c.LAS
	if c.Evidence == initenv.EvidenceGuest || c.Evidence == initenv.EvidenceSGX {
		las = "not needed"
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"CAS", c.CAS}, {"policy", c.Policy}, {"service", c.Service}, {"policy owners", c.PolicyOwners}, {"LAS", las}, {"output folder", c.Out}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not configured: %v (cloister generate sets them)", missing)
	}
	return nil
}

// parseExpect reads the expected CAS identity strictly: an unknown field
// or a malformed measurement is an error, never a policy that would trust
// whichever CAS answers.
func parseExpect(text string) (*attest.Policy, error) {
	if text == "" {
		return nil, fmt.Errorf("%s is empty: the evidence CAS must show (cloister generate --cas-identity sets it)", initenv.EnvExpect)
	}
	var p attest.Policy
	if err := strictjson.Unmarshal([]byte(text), &p); err != nil {
		return nil, fmt.Errorf("%s: %w", initenv.EnvExpect, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", initenv.EnvExpect, err)
	}
	if err := wire.CheckCASPolicy(&p); err != nil {
		return nil, fmt.Errorf("%s: %w (cloister generate --cas-identity)", initenv.EnvExpect, err)
	}
	if len(p.Identities) == 0 && !p.AllowSimulation {
		return nil, fmt.Errorf("%s names no CAS identity, so any CAS would do: give its measurements (cloister generate --cas-identity)", initenv.EnvExpect)
	}
	return &p, nil
}

// parseOwners reads the pinned owners: fingerprints and the threshold of
// them that signs a change, or NoOwners.
func parseOwners(text, threshold string) (*casclient.PinnedOwners, error) {
	if text == initenv.NoOwners {
		if threshold != "" {
			return nil, fmt.Errorf("%s is set for an owner-less manifest (%s=%s): cloister generate sets it only for owners", initenv.EnvPolicyOwnerThreshold, initenv.EnvPolicyOwners, initenv.NoOwners)
		}
		return &casclient.PinnedOwners{}, nil
	}
	pin := &casclient.PinnedOwners{}
	for _, fp := range strings.Split(text, ",") {
		if !ownerRE.MatchString(fp) {
			return nil, fmt.Errorf("%s: %q is not an owner fingerprint (sha256:<64 hex>) nor %q: cloister generate sets it", initenv.EnvPolicyOwners, fp, initenv.NoOwners)
		}
		if slices.Contains(pin.Owners, fp) {
			return nil, fmt.Errorf("%s: %q twice: cloister generate sets it", initenv.EnvPolicyOwners, fp)
		}
		pin.Owners = append(pin.Owners, fp)
	}
	n, err := strconv.Atoi(threshold)
	if err != nil || n < 1 || n > len(pin.Owners) {
		return nil, fmt.Errorf("%s=%q: how many of the %d pinned owners sign a change, 1 to %d: cloister generate sets it", initenv.EnvPolicyOwnerThreshold, threshold, len(pin.Owners), len(pin.Owners))
	}
	pin.Threshold = n
	return pin, nil
}

var ownerRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// parseSimKey reads the simulated CAS's key: required exactly when the
// expectation allows simulation.
func parseSimKey(text string, simulation bool) ([]*ecdsa.PublicKey, error) {
	switch {
	case !simulation && text != "":
		return nil, fmt.Errorf("%s is set but %s does not allow simulation: remove one (cloister generate sets both for sim)", initenv.EnvCASSimKey, initenv.EnvExpect)
	case !simulation:
		return nil, nil
	case text == "":
		return nil, fmt.Errorf("%s is empty: a simulated CAS is trusted only by the key it signs its evidence with (cloister generate --cas-sim-key sets it)", initenv.EnvCASSimKey)
	}
	k, err := keyfile.ParsePublic([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", initenv.EnvCASSimKey, err)
	}
	return []*ecdsa.PublicKey{k}, nil
}

// Run attests until it succeeds or ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	var expect casclient.Expect
	p, err := parseExpect(cfg.Expect)
	if err != nil {
		return err
	}
	expect.Policy = *p
	pin, err := parseOwners(cfg.PolicyOwners, cfg.PolicyOwnerThreshold)
	if err != nil {
		return err
	}
	if expect.Verify.SimKeys, err = parseSimKey(cfg.SimKey, p.AllowSimulation); err != nil {
		return err
	}
	if cfg.TestRoots != "" {
		if expect.Verify.TestRoots, err = parseTestRoots(cfg.TestRoots); err != nil {
			return err
		}
		log.Warn("INSECURE: CAS's evidence may chain to test roots, which no vendor vouches for (a fake confidential VM's)", "testRoots", len(expect.Verify.TestRoots))
	}
	lp, err := logPolicy(cfg)
	if err != nil {
		return err
	}
	var quoter casclient.Quoter = &lasclient.Client{URL: cfg.LAS}
	switch cfg.Evidence {
	case initenv.EvidenceGuest:
		quoter = &guestQuoter{paths: cfg.Guest, log: log}
	case initenv.EvidenceSGX:
		quoter = enclaveQuoter(cfg)
	}
	wait := cfg.MinRetry
	if wait == 0 {
		wait = time.Second
	}
	maxWait := cfg.MaxRetry
	if maxWait == 0 {
		maxWait = 30 * time.Second
	}
	last := ""
	for attempt := 1; ; attempt++ {
		res, err := attestOnce(ctx, cfg, expect, pin, quoter, lp, log)
		if err == nil && len(cfg.Exec) > 0 {
			return execApp(cfg.Exec, res.Env, log)
		}
		if err == nil {
			return nil
		}
		// The same reason once, not every few seconds: kubectl logs shows
		// why the pod waits.
		if err.Error() != last {
			log.Warn("not attested yet; retrying", "attempt", attempt, "reason", err.Error())
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("giving up: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, maxWait)
	}
}

func attestOnce(ctx context.Context, cfg Config, expect casclient.Expect, pin *casclient.PinnedOwners, quoter casclient.Quoter, lp *casclient.LogPolicy, log *slog.Logger) (*wire.AttestResult, error) {
	c, att, err := casclient.NewAttested(ctx, "https://"+cfg.CAS, expect, nil)
	if err != nil {
		if attest.CheckOf(err) != "" {
			return nil, fmt.Errorf("CAS at %s is not the CAS this pod expects: %w", cfg.CAS, err)
		}
		return nil, fmt.Errorf("reaching CAS at %s: %w", cfg.CAS, err)
	}
	defer c.CloseIdleConnections()
	if att.Claims.Insecure {
		log.Warn("CAS is trusted by simulated evidence: insecure, development only")
	}
	if att.Claims.TestRoot {
		log.Warn("INSECURE: CAS is trusted by evidence that chains to a test root", "type", string(att.Claims.Type))
	}
	res, err := c.AttestPinned(ctx, cfg.Policy, cfg.Service, pin, quoter, cfg.Out)
	if err != nil {
		return nil, fmt.Errorf("attesting as %s/%s: %w", cfg.Policy, cfg.Service, err)
	}
	if lp != nil {
		if err := logged(ctx, c, cfg, *lp); err != nil {
			// What a rolled-back CAS gave goes: the pod's containers
			// never start on it.
			return nil, errors.Join(err, os.RemoveAll(cfg.Out))
		}
	}
	// A premain's application runs as this process: the results stay
	// its own (0600), inside the enclave.
	if len(cfg.Exec) == 0 {
		if err := shareWithThePod(cfg.Out); err != nil {
			return nil, fmt.Errorf("making the results readable by the pod's containers: %w", err)
		}
	}
	log.Info("attested", "policy", cfg.Policy, "service", cfg.Service, "out", cfg.Out, "env", len(res.Env), "files", len(res.Files))
	return res, nil
}

// shareWithThePod leaves the results readable by the initializer's
// group, which generate gives every container of the pod
// (initenv.FilesGroup), and by no one else: folders 0750, files 0640.
// The walk stays inside dir (os.Root): a link another container put
// there changes nothing outside it.
func shareWithThePod(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	return fs.WalkDir(root.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		mode := os.FileMode(0o640)
		if d.IsDir() {
			mode = 0o750
		}
		return root.Chmod(path, mode)
	})
}

// logPolicy is what the pod requires of CAS's transparency log; nil
// when it requires nothing.
func logPolicy(cfg Config) (*casclient.LogPolicy, error) {
	if cfg.WitnessPolicy == "" && cfg.LogMemory == "" {
		if cfg.WitnessMaxAge != "" {
			return nil, fmt.Errorf("%s is set without %s (cloister generate sets both)", initenv.EnvWitnessMaxAge, initenv.EnvWitnessPolicy)
		}
		return nil, nil
	}
	lp := &casclient.LogPolicy{MaxAge: 2 * time.Hour}
	if cfg.WitnessPolicy != "" {
		p, err := witness.ParsePolicy([]byte(cfg.WitnessPolicy))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", initenv.EnvWitnessPolicy, err)
		}
		lp.Witnesses = p
	}
	if cfg.WitnessMaxAge != "" {
		d, err := time.ParseDuration(cfg.WitnessMaxAge)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s=%q: a duration such as 2h", initenv.EnvWitnessMaxAge, cfg.WitnessMaxAge)
		}
		lp.MaxAge = d
	}
	return lp, nil
}

// logged checks that the pod's policy, as CAS holds it now, is in CAS's
// transparency log at a checkpoint that meets lp and extends the one
// the pod's memory holds: a CAS whose state was rolled back is refused,
// with the checkpoints named.
func logged(ctx context.Context, c *casclient.Client, cfg Config, lp casclient.LogPolicy) error {
	h, err := c.History(ctx, cfg.Policy)
	if err != nil {
		return fmt.Errorf("reading policy %s's history: %w", cfg.Policy, err)
	}
	if len(h.Records) == 0 {
		return fmt.Errorf("CAS has no history of policy %s", cfg.Policy)
	}
	if _, err := c.Logged(ctx, cfg.LogMemory, lp, h.Records[len(h.Records)-1:]); err != nil {
		return fmt.Errorf("CAS's transparency log: %w", err)
	}
	return nil
}
