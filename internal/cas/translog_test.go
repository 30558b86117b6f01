package cas_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
)

// Every policy version CAS registers is an entry of its transparency log:
// a client that trusts CAS's log key reads the signed checkpoint, finds
// each version among the entries the checkpoint commits to, proves its
// inclusion from the tiles, and proves a later checkpoint extends an
// earlier one; the log and its key are the same after a restart.
func TestTransparencyLogOfPolicyVersions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url, caFile, stop := castest.Start(t, dir, "file:"+filepath.Join(dir, "seed.sealed"))
	c, _ := initAt(t, url, caFile)
	owner, _ := policy.NewKey()
	key, err := c.LogKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := note.NewVerifier(key.Key)
	if err != nil {
		t.Fatalf("the log's key %q: %v", key.Key, err)
	}
	checkpoint := func() tlog.Checkpoint {
		t.Helper()
		raw, err := c.LogCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := tlog.ParseCheckpoint(raw, key.Origin, verifier)
		if err != nil {
			t.Fatalf("%v\n%s", err, raw)
		}
		return cp
	}
	fetch := func(path string) ([]byte, error) { return c.LogTile(ctx, path) }
	doc := func(name string, v int) string {
		return fmt.Sprintf("version: cloister.dev/policy/v1\nname: %s\nowners: {keys: [\"%s\"]}\nservices:\n- {name: web, attestation: {identities: [{type: sgx, mrenclave: \"%s\"}]}, certificate: {sans: [web.%d.svc]}}\n",
			name, pemKey(owner), strings.Repeat("11", 32), v)
	}
	var digests []string
	register := func(name string, v int) {
		t.Helper()
		reg, err := c.RegisterPolicy(ctx, sign(t, c, doc(name, v), owner))
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, reg.Digest)
	}
	register("shop", 1)
	first := checkpoint()
	// The init is the log's first entry, the registration its second.
	if first.Size != 2 || !strings.HasSuffix(first.Origin, ".cloister/log") {
		t.Fatalf("after one registration: %v", first)
	}
	register("shop", 2)
	register("bank", 1)
	later := checkpoint()
	if later.Size != 4 {
		t.Fatalf("after three registrations: %v", later)
	}
	entries, err := tlog.Entries(later, 0, later.Size, fetch)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, raw := range entries {
		e, err := tlog.ParseEntry(raw)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if i == 0 {
			if e.Type != tlog.Init {
				t.Errorf("the first entry: %s", raw)
			}
			continue
		}
		got = append(got, fmt.Sprintf("%s v%d %s", e.Policy, e.Version, e.Digest))
		if i == 2 && e.Predecessor != digests[0] {
			t.Errorf("shop v2's predecessor %q, want %q", e.Predecessor, digests[0])
		}
		// Anyone reads the log: it names no policy, only its name's hash.
		if strings.Contains(string(raw), "shop") || strings.Contains(string(raw), "bank") {
			t.Errorf("entry %d names its policy: %s", i, raw)
		}
		p, err := tlog.ProveFromTiles(later, int64(i), fetch)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.VerifyInclusion(later, int64(i), raw, p); err != nil {
			t.Errorf("entry %d: %v", i, err)
		}
	}
	shop, bank := tlog.NameHash("shop"), tlog.NameHash("bank")
	want := []string{shop + " v1 " + digests[0], shop + " v2 " + digests[1], bank + " v1 " + digests[2]}
	if !slices.Equal(got, want) {
		t.Errorf("the log's entries %v, want %v", got, want)
	}
	p, err := tlog.ConsistencyFromTiles(first, later, fetch)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.VerifyConsistency(first, later, p); err != nil {
		t.Error(err)
	}
	if _, err := c.LogTile(ctx, "tile/entries/001"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a tile the log does not have: %v", err)
	}

	// A client that remembers: every version of shop is in the log at a
	// checkpoint it now remembers; a version CAS did not log is refused;
	// a CAS that shows it the smaller tree again (rolled back to its
	// state after the first registration) is refused, naming both.
	memory := filepath.Join(dir, "client", "log-checkpoint")
	if err := os.MkdirAll(filepath.Dir(memory), 0o700); err != nil {
		t.Fatal(err)
	}
	h, err := c.History(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := c.Logged(ctx, memory, casclient.LogPolicy{}, h.Records); err != nil || cp.Size != 4 {
		t.Fatalf("shop's versions in the log: %v %v", cp, err)
	}
	forged := h.Records[0]
	forged.Digest = strings.Repeat("0", 64)
	if _, err := c.Logged(ctx, memory, casclient.LogPolicy{}, append(h.Records, forged)); err == nil || !strings.Contains(err.Error(), "is not in CAS's transparency log") {
		t.Errorf("a version CAS did not log: %v", err)
	}
	err = tlog.Memory{File: memory}.Advance(first, verifier, fetch)
	if !errors.Is(err, tlog.ErrInconsistent) || !strings.Contains(err.Error(), "size 2") || !strings.Contains(err.Error(), "size 4") {
		t.Errorf("a rolled-back log: %v", err)
	}

	// Restarted, CAS signs the same log with the same key.
	stop()
	url, caFile, _ = castest.Start(t, dir, "file:"+filepath.Join(dir, "seed.sealed"))
	ca, _ := os.ReadFile(caFile)
	if c, err = casclient.New(url, ca, nil); err != nil {
		t.Fatal(err)
	}
	again, err := c.LogKey(ctx)
	if err != nil || *again != *key {
		t.Fatalf("the log's key after a restart: %+v %v, was %+v", again, err, key)
	}
	if cp := checkpoint(); cp.Size != later.Size || cp.Hash != later.Hash {
		t.Errorf("after a restart: %v, was %v", cp, later)
	}
}
