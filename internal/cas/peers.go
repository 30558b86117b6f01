package cas

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// peers is peer recovery between the replicas of one CAS: a ready replica
// hands the root seed to a replica that proves, by evidence bound to a key
// made for the request, that it is this CAS (the same identity as its
// own); a replica in recovery asks its ready peers for it, trusting a peer
// only by the peer's evidence for its TLS key, so both sides are attested.
type peers struct {
	cas *core.CAS
	// expect is what a peer's evidence must show to be this CAS: in
	// simulation, signed by this CAS's own simulation key (insecure); in
	// a confidential VM, this VM's own launch measurement.
	expect casclient.Expect
	// evidence makes this replica's own evidence over report data.
	evidence func(ctx context.Context, reportData []byte) (*attest.Evidence, error)
	// discover lists the addresses (host:port) of the ready peers.
	discover func(ctx context.Context) ([]string, error)
	dial     casclient.DialFunc
	log      *slog.Logger
}

// serve answers POST /v1/peer/seed.
func (p *peers) serve(req *wire.PeerSeedRequest) (*wire.PeerSeedResponse, error) {
	key, err := keyfile.ParsePublic([]byte(req.Key))
	if err == nil && key.Curve != elliptic.P256() {
		err = errors.New("not on P-256")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: key: a P-256 public key (PKIX, PEM) made for this request: %w", core.ErrInvalid, err)
	}
	binding, err := wire.KeyBinding(key)
	if err != nil {
		return nil, fmt.Errorf("%w: key: %w", core.ErrInvalid, err)
	}
	opts := p.expect.Verify
	opts.At = time.Now()
	claims, err := verify.Evidence(req.Evidence, opts)
	if err == nil {
		pol := p.expect.Policy
		pol.ReportData = binding
		err = pol.Check(claims)
	}
	if err != nil {
		p.log.Warn("audit: the seed refused to a peer that is not this CAS", "type", string(req.Evidence.Type), "reason", err.Error())
		return nil, fmt.Errorf("%w: a peer must be this CAS: %w", core.ErrRejected, err)
	}
	s, err := p.cas.Seed()
	if err != nil {
		return nil, err
	}
	sealed, err := wire.SealSeed(key, s)
	if err != nil {
		return nil, err
	}
	p.log.Info("audit: the seed handed to an attested peer", "type", string(req.Evidence.Type), "insecure", claims.Insecure)
	return &wire.PeerSeedResponse{Sealed: sealed}, nil
}

// recoverFrom asks the ready peers, in turn, for the seed, until one
// gives it and CAS is unlocked with it.
func (p *peers) recoverFrom(ctx context.Context) error {
	addrs, err := p.discover(ctx)
	if err != nil {
		return fmt.Errorf("finding ready peers: %w", err)
	}
	if len(addrs) == 0 {
		return errNoPeers
	}
	var errs []error
	for _, addr := range addrs {
		err := p.askOne(ctx, addr)
		if err == nil {
			p.log.Info("CAS recovered from a ready peer", "peer", addr)
			return nil
		}
		errs = append(errs, fmt.Errorf("peer %s: %w", addr, err))
	}
	return errors.Join(errs...)
}

var errNoPeers = errors.New("no ready peer")

func (p *peers) askOne(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	expect := p.expect
	expect.Verify.At = time.Now()
	c, _, err := casclient.NewAttested(ctx, "https://"+addr, expect, p.dial)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	binding, err := wire.KeyBinding(&key.PublicKey)
	if err != nil {
		return err
	}
	ev, err := p.evidence(ctx, binding)
	if err != nil {
		return fmt.Errorf("this replica's evidence: %w", err)
	}
	res, err := c.PeerSeed(ctx, &wire.PeerSeedRequest{Evidence: *ev, Key: string(policy.MarshalPublicKey(&key.PublicKey))})
	if err != nil {
		return err
	}
	s, err := wire.OpenSeed(key, res.Sealed)
	if err != nil {
		return err
	}
	return p.cas.Adopt(s)
}

// run asks peers for the seed whenever this replica is in recovery: at
// once, then every interval, until ctx ends. Shares some owners gave it
// meanwhile do not stop it: a replica that started while the owners
// recovered another would otherwise wait for shares that went elsewhere.
func (p *peers) run(ctx context.Context, interval time.Duration) {
	last := ""
	for ctx.Err() == nil {
		if state, _ := p.cas.Status(); state == wire.RecoveryMode {
			err := p.recoverFrom(ctx)
			if msg := fmt.Sprint(err); err != nil && msg != last {
				p.log.Info("no peer gave the seed yet: CAS waits for a ready peer, or for its owners' shares", "reason", msg)
				last = msg
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// peerInterval is how often a replica in recovery asks its peers again.
const peerInterval = 2 * time.Second

// peerIdentity is what this replica is, to its peers: what their evidence
// must show, and how it makes its own over report data.
type peerIdentity struct {
	expect   casclient.Expect
	evidence func(ctx context.Context, reportData []byte) (*attest.Evidence, error)
	err      error
}

// name is the identity as CAS's transparency log names it: the
// identity (launch measurement, pod policy) a replica's evidence must
// show; "" for a simulated CAS, which has none.
func (p peerIdentity) name() string {
	if ids := p.expect.Policy.Identities; p.err == nil && len(ids) == 1 {
		if raw, err := json.Marshal(ids[0]); err == nil {
			return string(raw)
		}
	}
	return ""
}

// simIdentity: a simulated CAS's replicas sign with its simulation key,
// which they share (insecure: whoever holds the key is this CAS).
func simIdentity(q *selfQuoter) peerIdentity {
	pub, err := q.public()
	return peerIdentity{
		expect: casclient.Expect{Policy: attest.Policy{AllowSimulation: true}, Verify: verify.Options{SimKeys: []*ecdsa.PublicKey{pub}}},
		evidence: func(_ context.Context, rd []byte) (*attest.Evidence, error) {
			return q.evidenceOver(rd)
		},
		err: err,
	}
}

// teeIdentity: a replica in a confidential VM is this CAS when its
// evidence shows this VM's own launch measurement and the host data of
// CAS's own pod policy (wire.CASIdentityOf): another pod of CAS's runtime
// class shares the measurement, never the host data; a new image or pod
// policy is another identity.
func teeIdentity(paths produce.Paths, own *attest.Evidence, opts verify.Options) peerIdentity {
	id := peerIdentity{evidence: func(ctx context.Context, rd []byte) (*attest.Evidence, error) {
		return guestEvidenceOver(ctx, paths, rd)
	}}
	claims, err := verify.Evidence(*own, opts)
	if err != nil {
		id.err = fmt.Errorf("verifying this VM's own evidence: %w", err)
		return id
	}
	expected, err := wire.CASIdentityOf(claims)
	if err != nil {
		id.err = fmt.Errorf("this VM's own evidence: %w", err)
		return id
	}
	id.expect.Policy.Identities = []attest.Identity{expected}
	id.expect.Verify = opts
	return id
}

func newPeers(cfg Config, cas *core.CAS, own peerIdentity, kube *kubeAPI, log *slog.Logger) (*peers, error) {
	if own.evidence == nil {
		return nil, errors.New("--peers: a replica proves it is this CAS by evidence: give --tee (or --simulation, insecure)")
	}
	if own.err != nil {
		// CAS still serves; only peer recovery is off, and says why.
		log.Warn("peer recovery is off: this replica cannot tell what its peers must be", "reason", own.err.Error())
		return nil, nil
	}
	p := &peers{cas: cas, expect: own.expect, evidence: own.evidence, discover: cfg.PeerAddrs, log: log}
	if p.discover == nil {
		if kube == nil {
			return nil, errors.New("--peers: the ready peers are the endpoints of CAS's Service, on the API of a kubernetes store: give --store kubernetes:NAMESPACE/NAME")
		}
		self, err := os.Hostname()
		if err != nil {
			return nil, err
		}
		p.discover = kube.endpointPeers(cfg.Peers, self)
	}
	log.Info("peer recovery: ready replicas hand the seed to replicas that prove they are this CAS", "peers", cfg.Peers, "insecure", own.expect.Policy.AllowSimulation)
	return p, nil
}
