package core

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/statemark"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// memMarks is a replica's volume, as far as its mark goes.
type memMarks struct {
	mu  sync.Mutex
	raw []byte
}

func (m *memMarks) Load() (*statemark.Mark, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.raw == nil {
		return nil, nil
	}
	return statemark.Parse(m.raw)
}

func (m *memMarks) Save(mark *statemark.Mark) error {
	raw, err := json.Marshal(mark)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.raw = raw
	return err
}

// snapshot and putBack copy the whole store file, as whoever writes the
// state (a node's root, a backup's restore) can.
func (f *fixture) snapshot() []byte {
	f.t.Helper()
	if err := f.db.Close(); err != nil {
		f.t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(f.dir, "cas.db"))
	if err != nil {
		f.t.Fatal(err)
	}
	f.db = nil
	return raw
}

func (f *fixture) putBack(sealer seal.Sealer, raw []byte) {
	f.t.Helper()
	if f.db != nil {
		if err := f.db.Close(); err != nil {
			f.t.Fatal(err)
		}
		f.db = nil
	}
	if raw == nil {
		if err := os.Remove(filepath.Join(f.dir, "cas.db")); err != nil {
			f.t.Fatal(err)
		}
	} else if err := os.WriteFile(filepath.Join(f.dir, "cas.db"), raw, 0o600); err != nil {
		f.t.Fatal(err)
	}
	f.open(sealer)
}

func (f *fixture) share(i int) seed.Share {
	f.t.Helper()
	sh, err := seed.OpenShare(f.shares.Shares[i].Sealed, f.rec[i])
	if err != nil {
		f.t.Fatal(err)
	}
	return sh
}

func ownerSignature(t *testing.T, key *ecdsa.PrivateKey, digest []byte) wire.OwnerSignature {
	t.Helper()
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest)
	if err != nil {
		t.Fatal(err)
	}
	return wire.OwnerSignature{Key: string(policy.MarshalPublicKey(&key.PublicKey)), Signature: base64.StdEncoding.EncodeToString(sig)}
}

// A whole state put back as it was before an update (consistent, so its
// digest matches) is refused by a replica that served the newer one: CAS
// stays in recovery and says which generations; the owners' shares alone
// do not take it, nor one owner's acceptance, nor a stranger's; the
// threshold of acceptances of exactly its generation does, and the state
// then moves past the mark, so a restart serves it and the acceptance
// opens nothing older again.
func TestOlderStateRefusedUntilTheOwnersAccept(t *testing.T) {
	sealer := seal.FileSealer{Path: t.TempDir() + "/seed"}
	f := &fixture{t: t, dir: t.TempDir(), marks: &memMarks{}}
	f.lasKey, _ = policy.NewKey()
	f.open(sealer)
	var pubs []*ecdsa.PublicKey
	for range 3 {
		k, _ := policy.NewKey()
		f.rec, pubs = append(f.rec, k), append(pubs, &k.PublicKey)
	}
	var err error
	if f.shares, err = f.cas.Init(pubs, 2, testToken); err != nil {
		t.Fatal(err)
	}
	f.owner, _ = policy.NewKey()
	if _, err := f.register(f.policyText(""), f.owner); err != nil {
		t.Fatal(err)
	}
	old := f.snapshot()
	f.open(sealer)
	older, _ := f.cas.StateMark()
	if _, err := f.register(strings.Replace(f.policyText(""), "validity: 2h", "validity: 3h", 1), f.owner); err != nil {
		t.Fatal(err)
	}
	newer, _ := f.cas.StateMark()
	if newer.Generation <= older.Generation {
		t.Fatalf("the mark did not rise: %d then %d", older.Generation, newer.Generation)
	}

	f.putBack(sealer, old)
	st, why := f.cas.Status()
	if st != wire.RecoveryMode || !strings.Contains(why, "the state is at generation "+strconv.FormatUint(older.Generation, 10)+", older than generation "+strconv.FormatUint(newer.Generation, 10)) {
		t.Fatalf("an older whole state: %s %q", st, why)
	}
	if _, p := f.cas.StateMark(); p != wire.ProblemRolledBack {
		t.Errorf("the problem: %q", p)
	}
	if _, err := f.cas.Attest(f.request("api", nil)); !errors.Is(err, ErrRecovery) {
		t.Errorf("attestation on the older state: %v", err)
	}
	accept := func(k *ecdsa.PrivateKey, gen uint64) *wire.Acceptance {
		return &wire.Acceptance{Generation: gen, OwnerSignature: ownerSignature(t, k, wire.AcceptDigest(newer.Check, gen))}
	}
	if _, err := f.cas.Recover(f.share(0), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cas.Recover(f.share(1), nil); !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "--accept-generation "+strconv.FormatUint(older.Generation, 10)) {
		t.Fatalf("the shares without acceptance: %v", err)
	}
	stranger, _ := policy.NewKey()
	if _, err := f.cas.Recover(f.share(1), accept(stranger, older.Generation)); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "is not a recovery owner") {
		t.Errorf("a stranger's acceptance: %v", err)
	}
	if _, err := f.cas.Recover(f.share(1), accept(f.rec[1], older.Generation)); !errors.Is(err, ErrRolledBack) {
		t.Errorf("one owner's acceptance of two: %v", err)
	}
	if _, err := f.cas.Recover(f.share(0), accept(f.rec[0], older.Generation+1)); !errors.Is(err, ErrRolledBack) {
		t.Errorf("an acceptance of another generation: %v", err)
	}
	forged := accept(f.rec[0], older.Generation)
	forged.Generation = newer.Generation
	if _, err := f.cas.Recover(f.share(0), forged); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("an acceptance whose generation was changed: %v", err)
	}
	if st, _ := f.cas.Status(); st != wire.RecoveryMode {
		t.Fatalf("refused acceptances unlocked CAS: %s", st)
	}
	if need, err := f.cas.Recover(f.share(0), accept(f.rec[0], older.Generation)); err != nil || need != 0 {
		t.Fatalf("two owners' acceptances: %d %v", need, err)
	}
	p, err := f.cas.Policy("shop")
	if err != nil || p.Version != 1 {
		t.Fatalf("the accepted state: %+v %v", p, err)
	}
	moved, problem := f.cas.StateMark()
	// The next epoch, and the acceptance's entry in the log after it.
	if moved.Generation != nextEpoch(newer.Generation)+1 || problem != "" {
		t.Errorf("after the acceptance the mark is %d (%q), want the next epoch %d and one", moved.Generation, problem, nextEpoch(newer.Generation))
	}
	// The log says CAS went back, and to which generation.
	err = f.cas.viewLog(func(_ *keys, etx store.Tx) error {
		n, err := tlog.Size(etx)
		if err != nil {
			return err
		}
		raw, err := tlog.ReadEntry(etx, n-1)
		if err != nil {
			return err
		}
		e, err := tlog.ParseEntry(raw)
		if err == nil && (e.Type != tlog.Accept || uint64(e.Version) != older.Generation) { //nolint:gosec // a test's small generation
			err = fmt.Errorf("the last entry: %s", raw)
		}
		return err
	})
	if err != nil {
		t.Errorf("the acceptance in the log: %v", err)
	}
	f.open(sealer)
	if st, why := f.cas.Status(); st != wire.Ready {
		t.Fatalf("a restart on the accepted state: %s %q", st, why)
	}
	// The newer state came back later: it is below the new epoch, so
	// the acceptance does not open it.
	f.putBack(sealer, old)
	if st, _ := f.cas.Status(); st != wire.RecoveryMode {
		t.Errorf("the accepted generation again, after it moved on: %s", st)
	}
}

// After a state loss CAS is never initialised again by its token: the
// status names its recovery owners, and only their threshold's signatures
// over this very init make a new CAS (a stranger's, too few, or ones
// over another init are refused).
func TestInitAfterLossNeedsTheOwners(t *testing.T) {
	f := &fixture{t: t, dir: t.TempDir(), marks: &memMarks{}}
	f.lasKey, _ = policy.NewKey()
	f.open(seal.NoSealer{})
	var pubs []*ecdsa.PublicKey
	for range 3 {
		k, _ := policy.NewKey()
		f.rec, pubs = append(f.rec, k), append(pubs, &k.PublicKey)
	}
	if _, err := f.cas.Init(pubs, 2, testToken); err != nil {
		t.Fatal(err)
	}
	lost, _ := f.cas.StateMark()
	f.putBack(seal.NoSealer{}, nil)
	st, why := f.cas.Status()
	if st != wire.Uninitialized || !strings.Contains(why, "no init token initialises it again") || !strings.Contains(why, policy.Fingerprint(pubs[0])) {
		t.Fatalf("after the loss: %s %q", st, why)
	}
	if _, p := f.cas.StateMark(); p != wire.ProblemLost {
		t.Errorf("the problem: %q", p)
	}
	if _, err := f.cas.Init(pubs, 2, testToken); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "cloister cas init --approve-key") {
		t.Fatalf("an init by the token after a loss: %v", err)
	}
	fresh, _ := policy.NewKey()
	owners := []*ecdsa.PublicKey{&fresh.PublicKey}
	fp := []string{policy.Fingerprint(&fresh.PublicKey)}
	digest := wire.InitDigest(lost.Check, fp, 1, fp, 1)
	stranger, _ := policy.NewKey()
	for name, approvals := range map[string][]wire.OwnerSignature{
		"a stranger's":         {ownerSignature(t, stranger, digest), ownerSignature(t, f.rec[0], digest)},
		"one of two needed":    {ownerSignature(t, f.rec[0], digest)},
		"the same owner twice": {ownerSignature(t, f.rec[0], digest), ownerSignature(t, f.rec[0], digest)},
		"over another init":    {ownerSignature(t, f.rec[0], digest), ownerSignature(t, f.rec[1], wire.InitDigest(lost.Check, fp, 1, fp, 2))},
	} {
		if _, err := f.cas.InitWith(InitRequest{Owners: owners, Threshold: 1, Approvals: approvals}); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s approvals: %v", name, err)
		}
		if st, _ := f.cas.Status(); st != wire.Uninitialized {
			t.Fatalf("%s approvals initialised CAS", name)
		}
	}
	if _, err := f.cas.InitWith(InitRequest{Owners: owners, Threshold: 1, Approvals: []wire.OwnerSignature{ownerSignature(t, f.rec[2], digest), ownerSignature(t, f.rec[0], digest)}}); err != nil {
		t.Fatalf("two owners' approvals: %v", err)
	}
	now, problem := f.cas.StateMark()
	if now == nil || bytes.Equal(now.Check, lost.Check) || problem != "" || len(now.Owners) != 1 || now.Owners[0] != fp[0] {
		t.Errorf("the new CAS's mark: %+v %q", now, problem)
	}
}

// A mark in the volume that this CAS did not write (another CAS's, or
// one whose generation was raised without the seed) is ignored once the
// seed shows it; a broken one is not read.
func TestMarkNotThisCASsIsIgnored(t *testing.T) {
	sealer := seal.FileSealer{Path: t.TempDir() + "/seed"}
	marks := &memMarks{}
	f := &fixture{t: t, dir: t.TempDir(), marks: marks}
	f.lasKey, _ = policy.NewKey()
	f.open(sealer)
	rec, _ := policy.NewKey()
	f.rec = []*ecdsa.PrivateKey{rec}
	if _, err := f.cas.Init([]*ecdsa.PublicKey{&rec.PublicKey}, 1, testToken); err != nil {
		t.Fatal(err)
	}
	m, err := marks.Load()
	if err != nil || m == nil {
		t.Fatalf("the saved mark: %+v %v", m, err)
	}
	m.Generation += 100 // raised by someone without the seed
	if err := marks.Save(m); err != nil {
		t.Fatal(err)
	}
	f.open(sealer)
	if st, why := f.cas.Status(); st != wire.Ready {
		t.Fatalf("a forged mark held CAS: %s %q", st, why)
	}
	if got, _ := f.cas.StateMark(); got.Generation == m.Generation {
		t.Errorf("the forged generation was kept: %d", got.Generation)
	}
	for _, raw := range []string{`{"generation":1}`, `{"generation":1,"owners":["a"],"threshold":1,"check":"AA==","mac":"AA==","x":1}`, strings.Repeat(" ", statemark.MaxSize+1)} {
		if _, err := statemark.Parse([]byte(raw)); err == nil {
			t.Errorf("%.60s parsed", raw)
		}
	}
}

// Whatever a request carries as a recovery owner's signature (an
// acceptance of an older state, an approval of an init after a loss), it
// counts only when an owner's key signed exactly that digest: no input
// forges one.
func FuzzOwnerSigned(f *testing.F) {
	owner, _ := policy.NewKey()
	owners := []string{policy.Fingerprint(&owner.PublicKey)}
	digest := wire.AcceptDigest(bytes.Repeat([]byte{1}, statemark.CheckSize), 7)
	good, err := ecdsa.SignASN1(rand.Reader, owner, digest)
	if err != nil {
		f.Fatal(err)
	}
	pub := string(policy.MarshalPublicKey(&owner.PublicKey))
	f.Add(pub, base64.StdEncoding.EncodeToString(good), uint64(8))
	f.Add("x", "AAAA", uint64(7))
	f.Fuzz(func(t *testing.T, key, sig string, generation uint64) {
		fp, err := ownerSigned(owners, wire.OwnerSignature{Key: key, Signature: sig}, wire.AcceptDigest(bytes.Repeat([]byte{1}, statemark.CheckSize), generation))
		if err != nil {
			return
		}
		// Only the owner signed, and only generation 7.
		if fp != owners[0] || generation != 7 {
			t.Fatalf("a signature counted for %s over generation %d: %q", fp, generation, sig)
		}
	})
}

// Another CAS's whole state, put where this CAS's was (by whoever writes
// the state, holding that other CAS's shares), is not taken in this CAS's
// place after a restart: the replica's mark names another seed, so the
// attacker's shares open nothing, and the status says why.
func TestAnotherCASsStateIsNotTakenInItsPlace(t *testing.T) {
	f := &fixture{t: t, dir: t.TempDir(), marks: &memMarks{}}
	f.lasKey, _ = policy.NewKey()
	f.open(seal.NoSealer{})
	rec, _ := policy.NewKey()
	f.rec = []*ecdsa.PrivateKey{rec}
	if _, err := f.cas.Init([]*ecdsa.PublicKey{&rec.PublicKey}, 1, testToken); err != nil {
		t.Fatal(err)
	}
	other := newFixture(t, seal.NoSealer{}, 1, 1)
	theirs := other.snapshot()
	other.open(seal.NoSealer{})
	f.putBack(seal.NoSealer{}, theirs)
	sh, err := seed.OpenShare(other.shares.Shares[0].Sealed, other.rec[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.cas.Recover(sh, nil); !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "the state is another CAS's") {
		t.Fatalf("another CAS's state opened with its own shares: %v", err)
	}
	if st, _ := f.cas.Status(); st != wire.RecoveryMode {
		t.Errorf("after the attacker's shares: %s", st)
	}
	if _, p := f.cas.StateMark(); p != wire.ProblemReplaced {
		t.Errorf("the problem: %q", p)
	}
}
