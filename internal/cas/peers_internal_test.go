package cas

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/produce/producetest"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/cas/core"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// The test helpers the package's own tests and, through export_test.go,
// its external ones share.

func mustKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func simKeyFile(t testing.TB) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "sim.pem")
	if _, err := keyfile.LoadOrCreate(f); err != nil {
		t.Fatal(err)
	}
	return f
}

func mustBolt(tb testing.TB, dir string) *store.Bolt {
	tb.Helper()
	b, err := store.OpenBolt(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// FuzzPeerSeed sends a ready CAS any seed request a client could: only
// evidence of this CAS over the request's key gets the seed, so nothing
// the fuzzer makes (it holds no simulation key) ever does.
func FuzzPeerSeed(f *testing.F) {
	simKey := simKeyFile(f)
	dir := f.TempDir()
	cfg := core.Config{Store: mustBolt(f, dir), Sealer: seal.NoSealer{}, InitToken: core.FixedToken("t")}
	c, err := core.Open(cfg)
	if err != nil {
		f.Fatal(err)
	}
	rec, _ := policy.NewKey()
	if _, err := c.Init([]*ecdsa.PublicKey{&rec.PublicKey}, 1, "t"); err != nil {
		f.Fatal(err)
	}
	q, err := newSelfQuoter(simKey, mustKey(f))
	if err != nil {
		f.Fatal(err)
	}
	p := &peers{cas: c, expect: simIdentity(q).expect, log: slog.New(slog.DiscardHandler)}
	key := string(policy.MarshalPublicKey(&mustKey(f).PublicKey))
	f.Add("sim", []byte("AAAA"), key)
	f.Add("snp", []byte{}, "nonsense")
	f.Fuzz(func(t *testing.T, typ string, raw []byte, key string) {
		res, err := p.serve(&wire.PeerSeedRequest{Evidence: attest.Evidence{Type: attest.Type(typ), Raw: raw}, Key: key})
		if err == nil || res != nil {
			t.Fatalf("the seed went to evidence %s %q and key %q", typ, raw, key)
		}
		if !errors.Is(err, core.ErrInvalid) && !errors.Is(err, core.ErrRejected) {
			t.Fatalf("neither invalid nor rejected: %v", err)
		}
		// A rejection names the check, which the API answers as its reason.
		if errors.Is(err, core.ErrRejected) && attest.CheckOf(err) == "" {
			t.Fatalf("a rejection without its check: %v", err)
		}
	})
}

// A CAS in a confidential VM without host data (no pod policy of its own)
// cannot tell its peers from any other VM of its runtime class: peer
// recovery is off, and says why.
func TestTEEIdentityNeedsHostData(t *testing.T) {
	s, err := producetest.NewSNPSigner(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	vm := s.ServeVM(t, filepath.Join(t.TempDir(), "vm"), nil, nil)
	ev, err := guestEvidenceOver(context.Background(), producetest.GuestPaths(vm), make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	id := teeIdentity(producetest.GuestPaths(vm), ev, verify.Options{TestRoots: s.Roots()})
	if id.err == nil || !strings.Contains(id.err.Error(), "without hostData") {
		t.Errorf("an identity without host data: %+v", id)
	}
}
