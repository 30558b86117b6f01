package cas_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest/produce"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// copyState gives dir a copy of the state in from (as replicas share it
// on the API), without its TLS key or sealed seed.
func copyState(t *testing.T, from, dir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(from, "cas.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cas.db"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func waitState(t *testing.T, url, ca string, want wire.State) {
	t.Helper()
	pem, _ := os.ReadFile(ca)
	c, err := casclient.New(url, pem, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pk, err := c.PublicKey(context.Background())
		if err == nil && pk.State == string(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CAS at %s never reached %s: %+v %v", url, want, pk, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A replica in recovery gets the seed from a ready peer that attests it
// as this CAS (the same simulation key), over a connection it trusts by
// the peer's own evidence; one with another key is refused, and stays in
// recovery.
func TestPeerRecovery(t *testing.T) {
	simKey := cas.SimKeyFile(t)
	dirA := t.TempDir()
	urlA, caA, _ := castest.StartConfig(t, cas.Config{StateDir: dirA, Sealer: "none", Simulation: true, SimulationKeyFile: simKey,
		PeerAddrs: func(context.Context) ([]string, error) { return nil, nil }})
	pemA, _ := os.ReadFile(caA)
	a, err := casclient.New(urlA, pemA, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := policy.NewKey()
	shares, err := a.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, dirA), castest.BoardPEM())
	if err != nil {
		t.Fatal(err)
	}
	cas0, err := a.CAs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	peerA := func(context.Context) ([]string, error) { return []string{strings.TrimPrefix(urlA, "https://")}, nil }

	// Another simulation key: another CAS, as far as A can tell.
	dirC := t.TempDir()
	copyState(t, dirA, dirC)
	urlC, caC, _ := castest.StartConfig(t, cas.Config{StateDir: dirC, Sealer: "none", Simulation: true, SimulationKeyFile: cas.SimKeyFile(t), PeerAddrs: peerA})
	time.Sleep(3 * cas.PeerInterval)
	waitState(t, urlC, caC, wire.RecoveryMode)

	dirB := t.TempDir()
	copyState(t, dirA, dirB)
	urlB, caB, _ := castest.StartConfig(t, cas.Config{StateDir: dirB, Sealer: "none", Simulation: true, SimulationKeyFile: simKey, PeerAddrs: peerA})
	waitState(t, urlB, caB, wire.Ready)
	pemB, _ := os.ReadFile(caB)
	b, _ := casclient.New(urlB, pemB, nil)
	if got, err := b.CAs(context.Background()); err != nil || got.RootCA != cas0.RootCA {
		t.Errorf("the recovered replica's CAs: %v", err)
	}
	waitState(t, urlC, caC, wire.RecoveryMode)

	// While a ready peer exists, an owner's share is refused unless
	// forced (C's peer refuses it, so only the owners bring it back).
	sh, err := seed.OpenShare(shares.Shares[0].Sealed, rec)
	if err != nil {
		t.Fatal(err)
	}
	pemC, _ := os.ReadFile(caC)
	cl, _ := casclient.New(urlC, pemC, nil)
	if _, err := cl.Recover(context.Background(), sh, false); err == nil || !strings.Contains(err.Error(), "cloister cas recover --force") {
		t.Errorf("a share while a ready peer exists: %v", err)
	}
	if res, err := cl.Recover(context.Background(), sh, true); err != nil || res.State != string(wire.Ready) {
		t.Errorf("a forced share: %+v %v", res, err)
	}
}

// The seed goes only to evidence that binds the request's key and is this
// CAS's: a request with its own evidence but another key, or evidence
// signed by another key, is refused with the reason.
func TestPeerSeedRefusals(t *testing.T) {
	simKey := cas.SimKeyFile(t)
	dir := t.TempDir()
	url, ca, _ := castest.StartConfig(t, cas.Config{StateDir: dir, Sealer: "none", Simulation: true, SimulationKeyFile: simKey,
		PeerAddrs: func(context.Context) ([]string, error) { return nil, nil }})
	pemCA, _ := os.ReadFile(ca)
	c, _ := casclient.New(url, pemCA, nil)
	rec, _ := policy.NewKey()
	if _, err := c.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, dir), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	mine, err := cas.NewSelfQuoter(simKey, cas.MustKey(t))
	if err != nil {
		t.Fatal(err)
	}
	other, err := cas.NewSelfQuoter(cas.SimKeyFile(t), cas.MustKey(t))
	if err != nil {
		t.Fatal(err)
	}
	key := cas.MustKey(t)
	binding, _ := wire.KeyBinding(&key.PublicKey)
	keyPEM := string(policy.MarshalPublicKey(&key.PublicKey))
	otherEv, _ := other.EvidenceOver(binding)
	unbound, _ := mine.EvidenceOver(make([]byte, 32))
	good, _ := mine.EvidenceOver(binding)
	for name, req := range map[string]*wire.PeerSeedRequest{
		"another simulation key":       {Evidence: *otherEv, Key: keyPEM},
		"evidence over another key":    {Evidence: *unbound, Key: keyPEM},
		"a key that is not P-256 PKIX": {Evidence: *good, Key: "nonsense"},
	} {
		if _, err := c.PeerSeed(context.Background(), req); err == nil {
			t.Errorf("%s: the seed was handed out", name)
		}
	}
	res, err := c.PeerSeed(context.Background(), &wire.PeerSeedRequest{Evidence: *good, Key: keyPEM})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := wire.OpenSeed(key, res.Sealed); err != nil || len(s) == 0 {
		t.Errorf("opening the seed: %v", err)
	}
	// A CAS without peers hands its seed to nobody.
	urlN, caN, _ := castest.Start(t, t.TempDir(), "none")
	pemN, _ := os.ReadFile(caN)
	n, _ := casclient.New(urlN, pemN, nil)
	if _, err := n.PeerSeed(context.Background(), &wire.PeerSeedRequest{Evidence: *good, Key: keyPEM}); err == nil || !strings.Contains(err.Error(), "hands its seed to no peer") {
		t.Errorf("a CAS without peers: %v", err)
	}
}

// A replica that took some owners' shares, not enough, still takes the
// seed from a peer that is ready: the owners' other shares went to
// another replica, which recovered.
func TestPeerRecoveryWithSomeSharesIn(t *testing.T) {
	simKey := cas.SimKeyFile(t)
	dirA := t.TempDir()
	urlA, caA, _ := castest.StartConfig(t, cas.Config{StateDir: dirA, Sealer: "none", Simulation: true, SimulationKeyFile: simKey,
		PeerAddrs: func(context.Context) ([]string, error) { return nil, nil }})
	pemA, _ := os.ReadFile(caA)
	a, _ := casclient.New(urlA, pemA, nil)
	r1, _ := policy.NewKey()
	r2, _ := policy.NewKey()
	shares, err := a.Init(context.Background(), []string{string(policy.MarshalPublicKey(&r1.PublicKey)), string(policy.MarshalPublicKey(&r2.PublicKey))}, 2,
		castest.InitToken(t, dirA), castest.BoardPEM())
	if err != nil {
		t.Fatal(err)
	}
	// B sees no peer until A is published as ready.
	var published atomic.Bool
	dirB := t.TempDir()
	copyState(t, dirA, dirB)
	urlB, caB, _ := castest.StartConfig(t, cas.Config{StateDir: dirB, Sealer: "none", Simulation: true, SimulationKeyFile: simKey,
		PeerAddrs: func(context.Context) ([]string, error) {
			if !published.Load() {
				return nil, nil
			}
			return []string{strings.TrimPrefix(urlA, "https://")}, nil
		}})
	waitState(t, urlB, caB, wire.RecoveryMode)
	sh, err := seed.OpenShare(shares.Shares[0].Sealed, r1)
	if err != nil {
		t.Fatal(err)
	}
	pemB, _ := os.ReadFile(caB)
	b, _ := casclient.New(urlB, pemB, nil)
	if res, err := b.Recover(context.Background(), sh, false); err != nil || res.Needed != 1 {
		t.Fatalf("one share of two: %+v %v", res, err)
	}
	published.Store(true)
	waitState(t, urlB, caB, wire.Ready)
}

// A replica of CAS in a confidential VM hands the seed only to evidence of
// its own launch measurement and its own host data (its pod policy): a
// process in another pod of CAS's runtime class, whose VM measures the
// same but carries another pod's policy, is refused, by name; the same
// request from CAS's own VM gets the seed.
func TestPeerSeedRefusedToAPodOfTheSameRuntimeClass(t *testing.T) {
	dir := t.TempDir()
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s.Measurement[0] = 0xCA
	roots := filepath.Join(dir, "roots.pem")
	if err := os.WriteFile(roots, s.RootsPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	casVM := s.ServeVM(t, filepath.Join(dir, "cas-vm"), bytes.Repeat([]byte{0xCA}, 32), nil)
	otherVM := s.ServeVM(t, filepath.Join(dir, "other-vm"), bytes.Repeat([]byte{0xBB}, 32), nil)
	state := filepath.Join(dir, "state")
	url, ca, _ := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none", TEE: true, Guest: producetest.GuestPaths(casVM), TestRoots: roots,
		PeerAddrs: func(context.Context) ([]string, error) { return nil, nil }})
	pemCA, _ := os.ReadFile(ca)
	c, _ := casclient.New(url, pemCA, nil)
	rec, _ := policy.NewKey()
	if _, err := c.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, state), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	ask := func(vm string) (*wire.PeerSeedResponse, *ecdsa.PrivateKey, error) {
		return askSeed(t, c, producetest.GuestPaths(vm))
	}
	if _, _, err := ask(otherVM); err == nil || !strings.Contains(err.Error(), "host data is") {
		t.Errorf("a pod of CAS's runtime class with another policy got the seed: %v", err)
	}
	res, key, err := ask(casVM)
	if err != nil {
		t.Fatalf("CAS's own VM: %v", err)
	}
	if seed, err := wire.OpenSeed(key, res.Sealed); err != nil || len(seed) == 0 {
		t.Errorf("opening the seed: %v", err)
	}
}

// Between SGX replicas the seed goes to a replica that proves it is the
// same enclave (MRENCLAVE and MRSIGNER, by its DCAP quote), and to no
// other enclave.
func TestPeerSeedBetweenSGXReplicas(t *testing.T) {
	dir := t.TempDir()
	machine := producetest.NewSGXMachine(t, dir)
	roots := machine.Roots
	enclave := func(name string, mr byte) produce.Paths {
		return machine.EnclavePaths(t, filepath.Join(dir, name), mr, 0x51)
	}
	casEnclave, replica, other := enclave("cas", 0xca), enclave("replica", 0xca), enclave("other", 0xcb)
	state := filepath.Join(dir, "state")
	url, ca, _ := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none", TEE: true, Guest: casEnclave, TestRoots: roots,
		CollateralDir: filepath.Join(dir, "collateral"), PeerAddrs: func(context.Context) ([]string, error) { return nil, nil }})
	pemCA, _ := os.ReadFile(ca)
	c, _ := casclient.New(url, pemCA, nil)
	rec, _ := policy.NewKey()
	if _, err := c.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, state), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	ask := func(guest produce.Paths) (*wire.PeerSeedResponse, *ecdsa.PrivateKey, error) {
		return askSeed(t, c, guest)
	}
	if _, _, err := ask(other); err == nil || !strings.Contains(err.Error(), "MRENCLAVE is cbcb") {
		t.Errorf("another enclave got the seed: %v", err)
	}
	res, key, err := ask(replica)
	if err != nil {
		t.Fatalf("a replica of the same enclave: %v", err)
	}
	if seed, err := wire.OpenSeed(key, res.Sealed); err != nil || len(seed) == 0 {
		t.Errorf("opening the seed: %v", err)
	}
}

// askSeed asks c for the seed as a replica whose evidence comes from
// guest, with a key of its own: the response, and the key it is sealed to.
func askSeed(t *testing.T, c *casclient.Client, guest produce.Paths) (*wire.PeerSeedResponse, *ecdsa.PrivateKey, error) {
	t.Helper()
	key := cas.MustKey(t)
	binding, _ := wire.KeyBinding(&key.PublicKey)
	ev, err := cas.GuestEvidenceOver(context.Background(), guest, binding)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.PeerSeed(context.Background(), &wire.PeerSeedRequest{Evidence: *ev, Key: string(policy.MarshalPublicKey(&key.PublicKey))})
	return res, key, err
}
