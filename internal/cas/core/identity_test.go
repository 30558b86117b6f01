package core

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
)

// logEntries is every entry of c's transparency log, in order.
func logEntries(t *testing.T, c *CAS) []tlog.Entry {
	t.Helper()
	var out []tlog.Entry
	err := c.viewLog(func(_ *keys, etx store.Tx) error {
		n, err := tlog.Size(etx)
		for i := int64(0); err == nil && i < n; i++ {
			var raw []byte
			if raw, err = tlog.ReadEntry(etx, i); err == nil {
				var e tlog.Entry
				if e, err = tlog.ParseEntry(raw); err == nil {
					out = append(out, e)
				}
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// CAS's identity (what its evidence shows) is in its log from its init,
// and again whenever a replica runs as another identity than the one the
// log names last; the same identity again adds nothing.
func TestIdentityInTheLog(t *testing.T) {
	sealer := seal.FileSealer{Path: t.TempDir() + "/seed"}
	f := &fixture{t: t, dir: t.TempDir()}
	f.lasKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.open(sealer)
	if err := f.cas.SetIdentity(`{"type":"snp","measurement":"aa"}`); err != nil {
		t.Fatalf("an uninitialised CAS: %v", err)
	}
	owner, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := f.cas.Init([]*ecdsa.PublicKey{&owner.PublicKey}, 1, testToken); err != nil {
		t.Fatal(err)
	}
	types := func() (out []tlog.EntryType, digests []string) {
		for _, e := range logEntries(t, f.cas) {
			out, digests = append(out, e.Type), append(digests, e.Digest)
		}
		return out, digests
	}
	if got, _ := types(); len(got) != 2 || got[0] != tlog.Init || got[1] != tlog.Identity {
		t.Fatalf("after the init: %v", got)
	}
	// Restarted (the seed unsealed) as the same identity, then another.
	f.open(sealer)
	for _, id := range []string{`{"type":"snp","measurement":"aa"}`, `{"type":"snp","measurement":"bb"}`, `{"type":"snp","measurement":"bb"}`} {
		if err := f.cas.SetIdentity(id); err != nil {
			t.Fatal(err)
		}
	}
	got, digests := types()
	if len(got) != 3 || got[2] != tlog.Identity || digests[2] == digests[1] || digests[2] != tlog.Digest([]byte(`{"type":"snp","measurement":"bb"}`)) {
		t.Errorf("after a restart as another identity: %v %v", got, digests)
	}
}
