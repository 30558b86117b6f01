package cas_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/witness"
)

// lateWitness is a witness on loopback whose URL is known before the log
// it cosigns for: CAS's log key exists only once CAS is initialised.
type lateWitness struct {
	srv     *httptest.Server
	dir     string
	vkey    string
	handler atomic.Pointer[http.Handler]
}

func newLateWitnesses(t testing.TB, n int) []*lateWitness {
	t.Helper()
	var out []*lateWitness
	for i := range n {
		w := &lateWitness{dir: t.TempDir()}
		var err error
		if _, w.vkey, err = witness.Key(w.dir, fmt.Sprintf("witness-%d.example", i)); err != nil {
			t.Fatal(err)
		}
		w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			h := w.handler.Load()
			if h == nil {
				http.Error(rw, "not yet", http.StatusServiceUnavailable)
				return
			}
			(*h).ServeHTTP(rw, r)
		}))
		t.Cleanup(w.srv.Close)
		out = append(out, w)
	}
	return out
}

// cosignFor makes w cosign for the log of vkey from now on.
func (w *lateWitness) cosignFor(t testing.TB, vkey string) {
	t.Helper()
	signer, _, err := witness.Key(w.dir, "")
	if err != nil {
		t.Fatal(err)
	}
	l, err := witness.ParseLog(vkey)
	if err != nil {
		t.Fatal(err)
	}
	wit, err := witness.New(w.dir, signer, []witness.Log{l}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	h := wit.Handler()
	w.handler.Store(&h)
}

func witnessPolicy(t testing.TB, ws []*lateWitness, group string) (*witness.Policy, string) {
	t.Helper()
	var b strings.Builder
	var names []string
	for i, w := range ws {
		fmt.Fprintf(&b, "witness w%d %s %s\n", i, w.vkey, w.srv.URL)
		names = append(names, fmt.Sprintf("w%d", i))
	}
	fmt.Fprintf(&b, "group g %s %s\nquorum g\n", group, strings.Join(names, " "))
	file := filepath.Join(t.TempDir(), "witness-policy")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := witness.ParsePolicy([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return p, file
}

// CAS sends each new checkpoint to its witnesses and serves their
// cosignatures. A CAS whose whole state is replaced by an older copy
// (its state mark included) is refused: by a client that remembers a
// later checkpoint, naming both; by a client that requires recent
// cosignatures, which the witnesses, holding a later checkpoint, no
// longer give; and when it then logs another history, its witnesses
// refuse to cosign it and keep both checkpoints.
func TestWitnessedLogCatchesARollback(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ws := newLateWitnesses(t, 3)
	wp, wpFile := witnessPolicy(t, ws, "2")
	start := func() (*casclient.Client, func()) {
		t.Helper()
		url, caFile, stop := castest.StartConfig(t, cas.Config{StateDir: dir, Sealer: "file:" + filepath.Join(dir, "seed.sealed"),
			Simulation: true, SimKeys: castest.LASPubFile(t), WitnessPolicy: wpFile})
		ca, _ := os.ReadFile(caFile)
		c, err := casclient.New(url, ca, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c, stop
	}
	url, caFile, stop := castest.StartConfig(t, cas.Config{StateDir: dir, Sealer: "file:" + filepath.Join(dir, "seed.sealed"),
		Simulation: true, SimKeys: castest.LASPubFile(t), WitnessPolicy: wpFile})
	c, _ := initAt(t, url, caFile)
	key, err := c.LogKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		w.cosignFor(t, key.Key)
	}
	verifier, _ := note.NewVerifier(key.Key)
	owner, _ := policy.NewKey()
	doc := func(v int) string {
		return fmt.Sprintf("version: cloister.dev/policy/v1\nname: shop\nowners: {keys: [\"%s\"]}\nservices:\n- {name: web, attestation: {identities: [{type: sgx, mrenclave: \"%s\"}]}, certificate: {sans: [web.%d.svc]}}\n",
			pemKey(owner), strings.Repeat("11", 32), v)
	}
	register := func(c *casclient.Client, v int) {
		t.Helper()
		if _, err := c.RegisterPolicy(ctx, sign(t, c, doc(v), owner)); err != nil {
			t.Fatal(err)
		}
	}
	served := func(c *casclient.Client) tlog.Checkpoint {
		t.Helper()
		raw, err := c.LogCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := tlog.ParseCheckpoint(raw, key.Origin, verifier)
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	lp := casclient.LogPolicy{Witnesses: wp, MaxAge: 2 * time.Hour}

	register(c, 1)
	if cp := served(c); cp.Size != 2 || !wp.Satisfied(cp.Note) || strings.Count(string(cp.Note), "\n— ") != 4 {
		t.Fatalf("the first checkpoint is not cosigned by the 3 witnesses:\n%s", cp.Note)
	}
	// The backup: the whole state folder, its mark included.
	stop()
	backup := t.TempDir()
	if err := os.CopyFS(backup, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	c, stop = start()
	register(c, 2)
	// One witness away: two of three still satisfy the policy.
	ws[2].srv.Config.Handler = http.NotFoundHandler()
	register(c, 3)
	memory := filepath.Join(t.TempDir(), "log-checkpoint")
	h, err := c.History(ctx, "shop")
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := c.Logged(ctx, memory, lp, h.Records); err != nil || cp.Size != 4 {
		t.Fatalf("the honest CAS at size 4: %v %v", cp, err)
	}

	// The state replaced by the backup.
	stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	c, _ = start()
	h, err = c.History(ctx, "shop")
	if err != nil || len(h.Records) != 1 {
		t.Fatalf("the restored CAS: %v %v", h, err)
	}
	_, err = c.Logged(ctx, memory, lp, h.Records)
	if !errors.Is(err, tlog.ErrInconsistent) || !strings.Contains(err.Error(), "size 2") || !strings.Contains(err.Error(), "size 4") {
		t.Errorf("a client that saw size 4: %v", err)
	}
	fresh := filepath.Join(t.TempDir(), "log-checkpoint")
	later := lp
	later.Now = time.Now().Add(3 * time.Hour)
	if _, err := c.Logged(ctx, fresh, later, h.Records); err == nil || !strings.Contains(err.Error(), "lacks cosignatures made in the last") {
		t.Errorf("a client that requires recent cosignatures, 3 hours on: %v", err)
	}
	// Another history: the witnesses hold size 4 and refuse it, smaller
	// (they hold more) and as large (the same size, another root, kept).
	for _, v := range []int{2, 3} {
		register(c, v)
		if cp := served(c); cp.Size != int64(v+1) || wp.Satisfied(cp.Note) {
			t.Errorf("the forked checkpoint was cosigned:\n%s", cp.Note)
		}
	}
	h, _ = c.History(ctx, "shop")
	if _, err := c.Logged(ctx, fresh, lp, h.Records); err == nil || !strings.Contains(err.Error(), "lacks the cosignatures") {
		t.Errorf("a client of the forked CAS: %v", err)
	}
	for i, w := range ws[:2] {
		conflicts, _ := os.ReadDir(filepath.Join(w.dir, "conflicts"))
		if len(conflicts) == 0 {
			t.Errorf("witness %d kept no conflicting checkpoints", i)
		}
	}
}

// BenchmarkRegisterWitnessed is a policy registration's latency, from the
// owner's request to CAS's answer, with 0, 1 and 3 witnesses on loopback
// (each a real witness syncing its state to disk before it answers),
// all required to cosign.
func BenchmarkRegisterWitnessed(b *testing.B) {
	for _, n := range []int{0, 1, 3} {
		b.Run(fmt.Sprintf("witnesses=%d", n), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			cfg := cas.Config{StateDir: dir, Sealer: "none", Simulation: true, SimKeys: castest.LASPubFile(b)}
			var ws []*lateWitness
			if n > 0 {
				ws = newLateWitnesses(b, n)
				_, cfg.WitnessPolicy = witnessPolicy(b, ws, "all")
			}
			url, caFile, _ := castest.StartConfig(b, cfg)
			c, _ := initAt(b, url, caFile)
			key, err := c.LogKey(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, w := range ws {
				w.cosignFor(b, key.Key)
			}
			owner, _ := policy.NewKey()
			v := 0
			for b.Loop() {
				b.StopTimer()
				v++
				doc := fmt.Sprintf("version: cloister.dev/policy/v1\nname: shop\nowners: {keys: [\"%s\"]}\nservices:\n- {name: web, attestation: {identities: [{type: sgx, mrenclave: \"%s\"}]}, certificate: {sans: [web.%d.svc]}}\n",
					pemKey(owner), strings.Repeat("11", 32), v)
				req := sign(b, c, doc, owner)
				b.StartTimer()
				if _, err := c.RegisterPolicy(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			if n > 0 {
				raw, _ := c.LogCheckpoint(ctx)
				if got := strings.Count(string(raw), "\n— "); got != n+1 {
					b.Fatalf("the last checkpoint carries %d signatures, want CAS's and %d witnesses'", got, n)
				}
			}
		})
	}
}
