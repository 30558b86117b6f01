// Package core is CAS itself, without its transport: the lifecycle of the
// seed (uninitialised, recovery mode, ready), policy registration with
// owner signatures and a signed, hash-chained history, secrets, and
// attestation that turns verified evidence into a certificate, secrets
// and configuration. The HTTP API (package api) is a thin edge over it.
package core

import (
	"crypto/ecdsa"
	"crypto/hpke"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"k8s.io/utils/clock"

	"github.com/cloister-cc/cloister/internal/attest/intelpcs"
	"github.com/cloister-cc/cloister/internal/attest/snp"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/statemark"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Errors the API edge maps to status codes.
var (
	ErrNotInitialized = errors.New("CAS is not initialised: run cloister cas init")
	ErrInitialized    = errors.New("CAS is already initialised")
	ErrRecovery       = errors.New("CAS is in recovery mode: owners must submit their shares (cloister cas recover)")
	ErrNotFound       = errors.New("not found")
	ErrUnauthorized   = errors.New("not authorised")
	ErrInvalid        = errors.New("invalid request")
	ErrRejected       = errors.New("attestation rejected")
	// ErrConflict: a policy signed for another place in its chain than
	// the one it would take.
	ErrConflict = errors.New("version conflict")
	// ErrSuperseded: a policy version CAS held and has since replaced.
	ErrSuperseded = errors.New("superseded")
	// ErrNameTaken: a name another policy holds.
	ErrNameTaken = errors.New("name taken")
	// ErrQuota: a new name beyond CAS's or its namespace's quota.
	ErrQuota = errors.New("quota exceeded")
)

// Buckets of the store; meta is in the clear (it is needed before the
// seed is known and holds nothing secret), the others are encrypted.
const (
	bucketMeta     = "meta"
	bucketCA       = "ca"
	bucketPolicies = "policies"
	bucketHistory  = "history"
	bucketSecrets  = "secrets"
)

// meta is what CAS knows of its seed without having it.
type meta struct {
	Commitment  seed.Commitment `json:"commitment"`
	Owners      []string        `json:"owners"` // recovery owners' fingerprints, share order
	Check       []byte          `json:"check"`  // a seed-derived value: proves a recovered seed is this CAS's
	Initialized time.Time       `json:"initialized"`
}

// InitToken is the one-time credential the first init must show: whoever
// reaches an uninitialised CAS first would otherwise become its recovery
// owner.
type InitToken interface {
	// Token is the current token, or why there is none (and where it is
	// expected).
	Token() ([]byte, error)
	// Consumed is called once the init the token allowed has succeeded.
	Consumed()
}

// FixedToken is an init token held in memory, for a CAS embedded in
// another program (and tests); it is never consumed.
type FixedToken string

func (f FixedToken) Token() ([]byte, error) { return []byte(f), nil }
func (FixedToken) Consumed()                {}

// SimKeys are the simulation keys whose evidence CAS takes: the LAS node
// keys of its cluster, or keys a developer names. Without them any pod
// could sign a simulated quote claiming another pod's policy.
type SimKeys interface {
	Keys() ([]*ecdsa.PublicKey, error)
}

// Config of a CAS.
type Config struct {
	Store  store.Store
	Sealer seal.Sealer
	// InitToken authorises the first init; without one CAS cannot be
	// initialised.
	InitToken InitToken
	// Name goes into the CA certificates' names.
	Name string
	// Collateral gives Intel PCS collateral and SEV-SNP endorsement keys
	// for hardware evidence from a folder (as for cloister evidence
	// verify), read once and watched (collateral.Folder); nil: none.
	Collateral verify.Folder
	// Intel and SNP, when set, give collateral from the vendors (through
	// the collateral cache) in place of Collateral's, with their CRLs
	// required.
	Intel intelpcs.Source
	SNP   snp.Source
	// SimKeys pins the keys simulated evidence must be signed by; nil
	// pins none, so no simulated workload evidence is taken.
	SimKeys SimKeys
	// AllowSimulation lets a policy's allowSimulation take effect. Without
	// it CAS refuses simulated evidence whatever a policy says: a CAS that
	// runs in a TEE never vouches for workloads no TEE vouches for.
	AllowSimulation bool
	// TestRoots are roots workload evidence may chain to beside the
	// vendors' (verify.Options.TestRoots): insecure, for tests and fake
	// confidential VMs only; every attestation they vouch for is logged.
	TestRoots []*x509.Certificate
	// MaxPolicies and MaxPerNamespace bound the names CAS holds, in all
	// and in one namespace (NAMESPACE/NAME); 0 means the default.
	MaxPolicies, MaxPerNamespace int
	// Marks keeps the state's high-water mark across restarts (CAS's
	// volume); nil keeps it in memory only.
	Marks statemark.Store
	// Witnesses cosign the transparency log's checkpoints; nil: none.
	Witnesses Cosigner
	Log       *slog.Logger
	Clock     clock.PassiveClock
	Metrics   *Metrics
}

// CAS is the attestation and configuration service.
type CAS struct {
	cfg Config

	// regMu orders registrations; mu guards the fields below, held
	// only briefly so attestations run in parallel.
	regMu sync.Mutex
	// identity is what this replica's evidence shows (SetIdentity).
	identity string
	// witnessMu runs one round of the witnesses at a time.
	witnessMu sync.Mutex
	mu        sync.RWMutex
	server    serverCert // server.go; its own lock
	state     wire.State
	why       string // why CAS is in recovery, beyond waiting for shares
	meta      *meta
	shares    map[uint64]seed.Share // submitted in recovery mode
	keys      *keys                 // set when wire.Ready
	// mark is the state's high-water mark (mark.go): nil until this
	// replica knows CAS was initialised; markTrusted once it is this
	// CAS's (made here, or its MAC checked with the seed).
	mark        *statemark.Mark
	markTrusted bool
	// problem is problemRolledBack, problemLost or problemReplaced
	// while the replica refuses the state against its mark.
	problem string
	// accepts are the owners' acceptances of an older state's generation
	// (fingerprint: generation), and acceptable the generations their
	// threshold accepted, until the state moves past the mark.
	accepts    map[string]uint64
	acceptable map[uint64]bool
}

// keys are everything derived from the seed, and the seed, which a ready
// replica hands to an attested peer (Seed).
type keys struct {
	seed       seed.Seed
	enc        *store.Encrypted
	authority  *pki.Authority
	encryption hpke.PrivateKey
	history    *ecdsa.PrivateKey
	challenge  []byte // authenticates read challenges
	// log signs the transparency log's checkpoints (origin logOrigin;
	// logKey is its verifier key, which clients pin).
	log               note.Signer
	logOrigin, logKey string
	policies          map[string]*registered
	// board approves new policy names (board.go).
	board boardState
	// generation is the state's, as the fields above reflect it: a
	// change decided on them is stored only at this generation.
	generation uint64
}

// Open reads the state: uninitialised, or initialised and then unsealed by
// the sealer, or else in recovery mode. On a store other replicas write
// too, it then takes in their changes as they come.
func Open(cfg Config) (*CAS, error) {
	c, err := open(cfg)
	if err != nil {
		return nil, err
	}
	if sh, ok := cfg.Store.(Shared); ok {
		sh.OnChange(c.refresh)
	}
	return c, nil
}

func open(cfg Config) (*CAS, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Name == "" {
		cfg.Name = "cas"
	}
	c := &CAS{cfg: cfg, state: wire.Uninitialized, shares: map[uint64]seed.Share{}, accepts: map[string]uint64{}}
	var err error
	if c.meta, err = readMeta(cfg.Store); err != nil {
		return nil, err
	}
	if cfg.Marks != nil {
		// Trusted only once the seed checks its MAC; before that it only
		// refuses (an init by token, another CAS's state), never admits.
		if c.mark, err = cfg.Marks.Load(); err != nil {
			cfg.Log.Warn("the state mark in CAS's volume does not read: ignored", "error", err.Error())
			c.mark = nil
		}
		if c.mark != nil {
			cfg.Metrics.mark.Set(float64(c.mark.Generation))
		}
	}

	if c.meta == nil {
		c.setState(wire.Uninitialized, "")
		if c.mark != nil {
			c.setProblem(problemLost)
			cfg.Log.Warn("CAS was initialised and its state is gone: only its recovery owners decide now (restore a backup and recover, or an init they sign)",
				"generation", c.mark.Generation, "recoveryOwners", c.mark.Owners)
		}
		return c, nil
	}
	c.state = wire.RecoveryMode
	c.unseal("")
	return c, nil
}

// unseal opens the sealed seed of an initialised CAS, or says in the
// state why CAS waits in recovery, after context. The caller holds mu (or
// has c alone).
func (c *CAS) unseal(context string) {
	var raw []byte
	var err error
	if slot, ok := c.cfg.Sealer.(seal.SlotSealer); ok {
		raw, err = c.unsealSlot(slot)
	} else {
		raw, err = c.cfg.Sealer.Unseal()
	}
	switch {
	case errors.Is(err, seal.ErrNotSealed):
		c.setState(wire.RecoveryMode, context+err.Error())
		return
	case err != nil:
		c.setState(wire.RecoveryMode, context+"unsealing failed: "+err.Error())
		return
	}
	s, err := seed.FromBytes(raw)
	if err == nil {
		err = c.unlock(s)
	}
	if err != nil {
		c.setState(wire.RecoveryMode, context+"the sealed seed does not open this state: "+err.Error())
	}
}

// setState records a state change in the log and metrics.
func (c *CAS) setState(s wire.State, why string) {
	c.state, c.why = s, why
	c.cfg.Metrics.setState(s)
	if why != "" {
		c.cfg.Log.Info("CAS state", "state", string(s), "reason", why)
	}
}

// Status is CAS's state with the reason it is not ready.
func (c *CAS) Status() (wire.State, string) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	switch c.state {
	case wire.Uninitialized:
		if m := c.mark; m != nil {
			return c.state, fmt.Sprintf("CAS was initialised and served its state up to generation %d, which is gone: no init token initialises it again. "+
				"Its recovery owners (%d of %v) restore a backup (cloister cas restore) and recover it accepting the backup's generation (cloister cas recover --accept-generation), "+
				"or sign an init of a new CAS (cloister cas init --approve-key OWNER.pem)", m.Generation, m.Threshold, m.Owners)
		}
		return c.state, ErrNotInitialized.Error()
	case wire.RecoveryMode:
		out := fmt.Sprintf("%s: %d of %d shares received", ErrRecovery, len(c.shares), c.meta.Commitment.Threshold())
		if c.why != "" {
			out += " (" + c.why + ")"
		}
		return c.state, out
	}
	return c.state, ""
}

// StateMark is this replica's high-water mark of the state and the
// state's problem, if any (problemRolledBack, problemLost,
// problemReplaced).
func (c *CAS) StateMark() (*wire.StateMark, string) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mark.Public(), c.problem
}

// WasInitialized says whether this replica knows CAS was initialised (a
// mark it keeps), whatever the state holds now.
func (c *CAS) WasInitialized() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mark != nil
}

// ready returns the keys, or why CAS cannot serve.
func (c *CAS) ready() (*keys, error) {
	switch c.state {
	case wire.Uninitialized:
		return nil, ErrNotInitialized
	case wire.RecoveryMode:
		return nil, ErrRecovery
	}
	return c.keys, nil
}

// Metrics are the CAS's series.
func (c *CAS) Metrics() *Metrics { return c.cfg.Metrics }
