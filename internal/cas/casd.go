// Package cas runs cloister-cas: flags to a CAS on its state directory,
// served over TLS 1.3 by package api.
//
// Its folder is the CAS subsystem, the root of trust of confidential
// workloads: core (CAS without transport), policy, seed, store and pki
// beneath it; api (the HTTPS server) and wire (its requests and
// responses, the only part a caller shares with the server); client
// (attested connections to CAS) and conn (how a CAS resource is reached).
// Only this daemon links the store.
package cas

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/collateral"
	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/cas/api"
	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/cas/witness"
)

// DefaultListen is CAS's client port.
const DefaultListen = ":8081"

// Config is cloister-cas's command line.
type Config struct {
	Listen string
	// DrainDelay is how long CAS, told to stop, goes on serving while it
	// reports not ready, so that clients that chose this replica just
	// before it was deleted are answered, and new ones go to the others.
	DrainDelay time.Duration
	StateDir   string
	// Store is where the state is: empty for bbolt in StateDir, or
	// kubernetes:NAMESPACE/NAME for the Kubernetes API, shared by the
	// replicas of the CAS resource NAME.
	Store string
	// KubeConfig reaches the API for a kubernetes store; nil: the
	// pod's service account.
	KubeConfig *rest.Config
	Sealer     string // none | file:PATH | ... (ParseSealer)
	// Node is the node CAS runs on: the slot of the state that the SGX
	// node sealers (sgx-node, sgx-signer-node) keep its sealed seed in.
	Node          string
	TLSSANs       []string
	CollateralDir string
	// PCS and KDS are the Intel PCS (or PCCS) and AMD KDS collateral is
	// fetched from, into a cache in the state folder; empty: none.
	PCS, KDS string
	// DCAPKeyFile holds the Intel DCAP API key sent to PCS (the operator
	// mounts its Secret there).
	DCAPKeyFile string
	// Simulation: CAS vouches for its own TLS key with simulated evidence
	// (no TEE here to do it for real) and accepts simulated evidence from
	// workloads whose policy allows it; without it CAS refuses simulation.
	Simulation bool
	// SimKeys is a file, or a folder of files, of PEM public keys:
	// the only keys whose simulated workload evidence CAS takes. Empty:
	// any key (insecure even for simulation; said at start).
	SimKeys string
	// InitTokenFile holds the one-time init token (the operator mounts
	// its Secret there). Empty: CAS makes one in the state folder while it
	// is uninitialised and removes it once it is used.
	InitTokenFile string
	// SimulationKeyFile, with Simulation, holds the key CAS signs its own
	// evidence with (the operator mounts its Secret there). Empty:
	// SimulationKeyFile in the state folder, made when missing, with its
	// public key in SimulationPubKeyFile for clients to pin.
	SimulationKeyFile string
	// Peers names CAS's Service, whose ready endpoints (with a kubernetes
	// store) are the replicas this one recovers from; PeerAddrs, when set,
	// lists them instead (tests).
	Peers     string
	PeerAddrs func(context.Context) ([]string, error)
	// TEE: CAS runs in a confidential VM and vouches for its TLS key with
	// the VM's own evidence (SEV-SNP or TDX through configfs-tsm or the
	// guest devices at Guest's paths). Refused with Simulation.
	TEE   bool
	Guest produce.Paths
	// HostEnv: the HostChosen flags come from the environment
	// (ApplyHostEnv), in an enclave whose manifest fixes the rest.
	HostEnv bool
	// TestRoots is a PEM file of test roots workload evidence may chain to
	// (insecure: tests and fake confidential VMs only).
	TestRoots string
	// WitnessPolicy is a file naming the witnesses CAS sends its
	// transparency log's checkpoints to (witness.ParsePolicy); "": none.
	WitnessPolicy string
	// Ready, when set, gets the address CAS listens on.
	Ready func(addr string)
}

// TLS files in the state directory: the key survives restarts so clients
// keep trusting the certificate, which is written for them.
const (
	tlsKeyFile  = "tls.key"
	TLSCertFile = "tls.crt"
	// InitTokenFile is a standalone CAS's init token in its state folder.
	InitTokenFile = "init-token"
)

// collateralCache is the cache of vendor collateral --pcs and --kds ask
// for, kept in the state folder; nil when neither is given.
func collateralCache(cfg Config, log *slog.Logger) (*collateral.Cache, error) {
	if cfg.PCS == "" && cfg.KDS == "" {
		if cfg.DCAPKeyFile != "" {
			return nil, errors.New("--dcap-api-file is the key for --pcs: give --pcs too")
		}
		return nil, nil
	}
	cache := &collateral.Cache{Dir: filepath.Join(cfg.StateDir, "collateral"), Log: log}
	if cfg.PCS != "" {
		var key string
		if cfg.DCAPKeyFile != "" {
			var err error
			if key, err = collateral.ReadAPIKeyFile(cfg.DCAPKeyFile); err != nil {
				return nil, fmt.Errorf("--dcap-api-file %s: %w", cfg.DCAPKeyFile, err)
			}
		}
		cache.Intel = &collateral.PCS{URL: cfg.PCS, Key: key}
		log.Info("Intel collateral comes from a PCS, cached", "pcs", cfg.PCS, "apiKey", key != "")
	}
	if cfg.KDS != "" {
		cache.AMD = &collateral.KDS{URL: cfg.KDS}
		log.Info("AMD collateral comes from a KDS, cached", "kds", cfg.KDS)
	}
	return cache, nil
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.StateDir == "" {
		return errors.New("--state-dir is required: where CAS keeps its state (the CAS volume)")
	}
	if cfg.TEE && cfg.Simulation {
		return errors.New("--tee and --simulation exclude each other: a CAS in a confidential VM never vouches for itself with simulated evidence")
	}
	d := &daemon{cfg: cfg, log: log}
	defer d.close()
	if err := d.openCore(ctx); err != nil {
		return err
	}
	server, cert, err := d.newServer(ctx)
	if err != nil {
		return err
	}
	return d.serve(ctx, server, cert)
}

// daemon is a CAS process being started: what each phase of Run makes
// for the next.
type daemon struct {
	cfg       Config
	log       *slog.Logger
	testRoots []*x509.Certificate
	db        store.Store
	kube      *kubeAPI
	simKeys   core.SimKeys
	coreCfg   core.Config
	cache     *collateral.Cache
	cas       *core.CAS
}

func (d *daemon) close() {
	if d.db != nil {
		_ = d.db.Close()
	}
}

// openCore opens CAS's state with its sealer, pinned keys and collateral,
// and makes the init token of a CAS never initialised.
func (d *daemon) openCore(ctx context.Context) error {
	cfg, log := d.cfg, d.log
	sealer, err := sealerFor(cfg, log)
	if err != nil {
		return err
	}
	if d.testRoots, err = loadTestRoots(cfg.TestRoots, log); err != nil {
		return err
	}
	if err := derivedKeyFits(ctx, cfg, sealer, d.testRoots); err != nil {
		return err
	}
	if d.db, d.kube, err = openStore(ctx, cfg, log); err != nil {
		return err
	}
	token := &fileToken{path: cfg.InitTokenFile}
	if token.path == "" {
		token.path, token.own = filepath.Join(cfg.StateDir, InitTokenFile), true
	}
	if cfg.SimKeys != "" {
		d.simKeys = &freshKeys{files: pemKeys(cfg.SimKeys), now: time.Now}
		keys, err := d.simKeys.Keys()
		if err != nil {
			return fmt.Errorf("--sim-keys: %w", err)
		}
		log.Info("simulated workload evidence is taken from the pinned keys only", "keys", len(keys), "from", cfg.SimKeys)
	} else if cfg.Simulation {
		log.Warn("no simulation keys pinned: simulated workload evidence is refused; pin the LAS keys (or a developer's) with --sim-keys")
	}
	d.coreCfg = core.Config{Store: d.db, Sealer: sealer, InitToken: token, SimKeys: d.simKeys,
		AllowSimulation: cfg.Simulation, TestRoots: d.testRoots, Log: log, Metrics: core.NewMetrics(),
		Marks: markFile{path: filepath.Join(cfg.StateDir, StateMarkFile)}}
	if cfg.CollateralDir != "" {
		folder := &collateral.Folder{Dir: cfg.CollateralDir, Log: log}
		d.coreCfg.Collateral = folder
		go func() {
			if err := folder.Watch(ctx); err != nil {
				log.Warn("the collateral folder is not watched: it is read once, at the first attestation", "dir", cfg.CollateralDir, "error", err)
			}
		}()
	}
	if d.cache, err = collateralCache(cfg, log); err != nil {
		return err
	}
	if d.cache != nil {
		if d.cache.Intel != nil {
			d.coreCfg.Intel = d.cache
		}
		if d.cache.AMD != nil {
			d.coreCfg.SNP = d.cache
		}
		d.coreCfg.Metrics.Registry.MustRegister(collateral.NewCollector(d.cache))
		go d.cache.Run(ctx, 0)
	}
	if cfg.WitnessPolicy != "" {
		p, err := witness.ReadPolicy(cfg.WitnessPolicy)
		if err != nil {
			return fmt.Errorf("--witness-policy: %w", err)
		}
		d.coreCfg.Witnesses = p.Cosigner(&http.Client{Timeout: witnessRequestTimeout})
		log.Info("the transparency log's checkpoints go to witnesses", "witnesses", len(p.Endpoints()), "policy", cfg.WitnessPolicy)
	}
	if d.cas, err = core.Open(d.coreCfg); err != nil {
		return err
	}
	if d.coreCfg.Witnesses != nil {
		go d.witnessLoop(ctx)
	}
	// A CAS that was initialised (its mark says so) gets no token again:
	// after a loss its owners decide.
	if state, _ := d.cas.Status(); state == wire.Uninitialized && token.own && !d.cas.WasInitialized() {
		if err := token.ensure(); err != nil {
			return err
		}
		log.Info("uninitialised: the init token is in a file only the owners of this machine read; cloister cas init --init-token-file uses it", "initToken", token.path)
	}
	return nil
}

// newServer makes CAS's API: its TLS identity, the evidence that vouches
// for it (the confidential VM's, or simulated), and its peers.
func (d *daemon) newServer(ctx context.Context) (*api.Server, tls.Certificate, error) {
	cfg, log := d.cfg, d.log
	// In a confidential VM the TLS key never leaves it: a key on the
	// volume, beside evidence that vouches for it, would let the host be
	// CAS. A new key each start; clients trust CAS by the evidence made
	// for it, not by a pinned certificate.
	cert, id, err := tlsIdentity(cfg.StateDir, cfg.TLSSANs, cfg.TEE)
	if err != nil {
		return nil, cert, err
	}
	server := &api.Server{CAS: d.cas, Identity: id, TLSKey: cert.PrivateKey.(crypto.Signer)}
	if cache := d.cache; cache != nil {
		server.Collateral = func() *wire.CollateralHealth {
			h := cache.Health()
			out := &wire.CollateralHealth{Entries: h.Entries, Stale: h.Stale, Expired: h.Expired}
			if !h.NextUpdate.IsZero() {
				out.NextUpdate = &h.NextUpdate
			}
			return out
		}
	}
	var own peerIdentity
	if cfg.TEE {
		ev, err := guestEvidence(ctx, cfg.Guest, &cert.PrivateKey.(*ecdsa.PrivateKey).PublicKey)
		if err != nil {
			return nil, cert, fmt.Errorf("--tee: %w", err)
		}
		own = teeIdentity(cfg.Guest, ev, verify.Options{TestRoots: d.testRoots, Intel: d.coreCfg.Intel, SNP: d.coreCfg.SNP, Folder: d.coreCfg.Collateral})
		server.Evidence = func() (*attest.Evidence, error) { return ev, nil }
		if (ev.Type == attest.SGX || ev.Type == attest.TDX) && d.coreCfg.Collateral != nil {
			server.Endorsements = endorsements(d.coreCfg.Collateral, log)
		}
		log.Info("CAS vouches for its TLS key with this confidential VM's evidence", "type", string(ev.Type), "bytes", len(ev.Raw))
	}
	if cfg.Simulation {
		keyFile := cfg.SimulationKeyFile
		if keyFile == "" {
			var pub string
			if keyFile, pub, err = ownSimulationKey(cfg.StateDir); err != nil {
				return nil, cert, err
			}
			log.Warn("simulation: CAS vouches for its TLS key with simulated evidence (insecure); clients pin its simulation key", "simulationKey", pub)
		}
		q, err := newSelfQuoter(keyFile, cert.PrivateKey.(*ecdsa.PrivateKey))
		if err != nil {
			return nil, cert, fmt.Errorf("--simulation-key-file: %w", err)
		}
		server.Evidence = q.Evidence
		own = simIdentity(q)
	}
	if p, ok := d.simKeys.(*freshKeys); ok {
		server.SimulationKeys = p.Fingerprints
	}
	if id := own.name(); id != "" {
		if err := d.cas.SetIdentity(id); err != nil {
			log.Warn("logging CAS's identity in its transparency log", "err", err)
		}
	}
	if cfg.Peers != "" || cfg.PeerAddrs != nil {
		p, err := newPeers(cfg, d.cas, own, d.kube, log)
		if err != nil {
			return nil, cert, err
		}
		if p != nil {
			server.PeerSeed, server.ReadyPeers = p.serve, p.discover
			go p.run(ctx, peerInterval)
		}
	}
	return server, cert, nil
}

// serve serves the API over TLS 1.3 until ctx ends, then, not ready any
// more, a while longer for clients that chose this replica.
func (d *daemon) serve(ctx context.Context, server *api.Server, cert tls.Certificate) error {
	cfg, log := d.cfg, d.log
	srv := &http.Server{
		Handler: server.Handler(),
		// A client may present a certificate, which only the transit
		// endpoint reads (core checks it against CAS's own CAs): TLS 1.3
		// makes the client prove its key, so a request is bound to its
		// connection and cannot be replayed on another.
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert,
			// A workload that names CAS's trust domain gets CAS's
			// server certificate from its root CA (core.ServerCertificate);
			// everyone else the replica's own, which its evidence vouches for.
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if !strings.HasSuffix(hello.ServerName, "."+policy.ReservedDomain) {
					return nil, nil
				}
				return d.cas.ServerCertificate(hello.ServerName)
			}},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	state, why := d.cas.Status()
	log.Info("serving CAS", "address", lis.Addr().String(), "state", string(state), "reason", why, "tlsCertificate", filepath.Join(cfg.StateDir, TLSCertFile))
	if cfg.Ready != nil {
		cfg.Ready(lis.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(lis, "", "") }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if cfg.DrainDelay > 0 {
		server.Drain()
		log.Info("stopping: not ready any more, serving a while longer for clients that chose this replica", "for", cfg.DrainDelay.String())
		select {
		case err := <-errc:
			return err
		case <-time.After(cfg.DrainDelay):
		}
	}
	return shutdown(srv, 10*time.Second)
}

// fileToken is the init token in a file: one the operator mounts, or one
// CAS makes in its state folder (own) and removes once used.
type fileToken struct {
	path string
	own  bool
}

func (f *fileToken) Token() ([]byte, error) {
	raw, err := os.ReadFile(f.path)
	if err != nil || len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("none in %s, where this CAS expects it", f.path)
	}
	return raw, nil
}

func (f *fileToken) Consumed() {
	if f.own {
		_ = os.Remove(f.path) // a stale token opens nothing: CAS is initialised
	}
}

// ensure makes a token unless one is there.
func (f *fileToken) ensure() error {
	if _, err := f.Token(); err == nil {
		return nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	_, err := atomicfile.WriteIfChanged(f.path, []byte(base64.RawURLEncoding.EncodeToString(b)+"\n"), 0o600)
	return err
}

// tlsIdentity loads or makes the TLS key (in memory only when
// ephemeral) and makes (or keeps) a certificate for the SANs.
func tlsIdentity(dir string, sans []string, ephemeral bool) (tls.Certificate, wire.Identity, error) {
	keyPath := filepath.Join(dir, tlsKeyFile)
	if ephemeral {
		keyPath = ""
		if err := os.Remove(filepath.Join(dir, tlsKeyFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return tls.Certificate{}, wire.Identity{}, fmt.Errorf("removing a TLS key kept outside the VM: %w", err)
		}
	}
	key, err := keyfile.LoadOrCreate(keyPath)
	if err != nil {
		return tls.Certificate{}, wire.Identity{}, fmt.Errorf("TLS key: %w", err)
	}
	dns, ips := []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	for _, san := range sans {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else if san != "" {
			dns = append(dns, san)
		}
	}
	// The same certificate while the key and names stay: a client that
	// pinned it (--cas-ca) must still reach CAS after a restart, which is
	// exactly when the owners recover it.
	certFile := filepath.Join(dir, TLSCertFile)
	der := reusableCert(certFile, key, dns, ips, time.Now())
	if der == nil {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: "cloister-cas"},
			NotBefore:    time.Now().Add(-time.Minute),
			NotAfter:     time.Now().Add(365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		if der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key); err != nil {
			return tls.Certificate{}, wire.Identity{}, err
		}
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if _, err := atomicfile.WriteIfChanged(certFile, certPEM, 0o644); err != nil {
		return tls.Certificate{}, wire.Identity{}, fmt.Errorf("writing the TLS certificate: %w", err)
	}
	id := wire.Identity{TLSCertificate: string(certPEM)}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, id, nil
}

// renewBefore: a certificate closer than this to its end is made anew.
const renewBefore = 30 * 24 * time.Hour

// reusableCert is the certificate in file if it is for key, names exactly
// dns and ips, and is valid for a while yet; else nil.
func reusableCert(file string, key *ecdsa.PrivateKey, dns []string, ips []net.IP, now time.Time) []byte {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	block, _ := pem.Decode(raw)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !key.PublicKey.Equal(cert.PublicKey) || now.Add(renewBefore).After(cert.NotAfter) || now.Before(cert.NotBefore) {
		return nil
	}
	if !slices.Equal(cert.DNSNames, dns) || !slices.EqualFunc(cert.IPAddresses, ips, func(a, b net.IP) bool { return a.Equal(b) }) {
		return nil
	}
	return block.Bytes
}

// endorsements passes on the Intel collateral of CAS's collateral folder,
// which judges CAS's own quote, so clients need no PCS to trust CAS.
func endorsements(folder verify.Folder, log *slog.Logger) func() *wire.Endorsements {
	return func() *wire.Endorsements {
		f, err := folder.Contents()
		if err != nil || len(f.Intel.TCBInfo) == 0 {
			if err != nil {
				log.Warn("CAS's collateral folder cannot be read: clients verify CAS's quote with collateral of their own", "error", err.Error())
			}
			return nil
		}
		c := f.Intel
		return &wire.Endorsements{TCBInfo: c.TCBInfo, QEIdentity: c.QEIdentity, SigningChain: c.SigningChain, PCKCRL: c.PCKCRL, RootCRL: c.RootCRL}
	}
}
