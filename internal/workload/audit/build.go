package audit

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/transparency-dev/formats/proof"

	"github.com/cloister-cc/cloister/internal/attest/verify"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Build makes the bundle of manifest name's history (records, as CAS
// served them) from the CAS c reaches, whose evidence must meet expect;
// remembered is the checkpoint the workspace saw before (nil: none).
func Build(ctx context.Context, c *casclient.Client, expect casclient.Expect, name string, records []wire.Record, remembered []byte) (*Bundle, error) {
	nonce := make([]byte, 32)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	v, err := c.Evidence(ctx, nonce)
	if err != nil {
		return nil, fmt.Errorf("CAS's statement: %w", err)
	}
	// Nothing in a bundle goes unchecked: the statement names the key, so
	// the certificate goes; the evidence is kept decoded, as it is judged.
	v.TLSCertificate = ""
	if v.Evidence != nil {
		v.Evidence.Raw = verify.Decode(v.Evidence.Raw)
	}
	vouch, err := casclient.VerifyVouched(v, nonce, expect)
	if err != nil {
		return nil, fmt.Errorf("CAS's statement: %w", err)
	}
	st := vouch.Statement
	if st.Log == nil {
		return nil, fmt.Errorf("CAS is %s: it has no transparency log yet", st.State)
	}
	cp, lv, err := checkpoint(st)
	if err != nil {
		return nil, err
	}
	fetch := func(path string) ([]byte, error) { return c.LogTile(ctx, path) }
	index, err := c.Indexed(ctx, cp)
	if err != nil {
		return nil, err
	}
	b := &Bundle{Type: Type, Manifest: name, Records: records, Nonce: nonce, CAS: *v}
	for _, r := range records {
		i, ok := index[casclient.EntryOf(r)]
		if !ok {
			return nil, fmt.Errorf("version %d of %s is not in CAS's transparency log at %s", r.Version, r.Name, cp)
		}
		p, err := tlog.ProveFromTiles(cp, i, fetch)
		if err != nil {
			return nil, err
		}
		tp := proof.TLogProof{Index: uint64(i), Checkpoint: cp.Note} //nolint:gosec // an index is not negative
		for _, h := range p {
			tp.Hashes = append(tp.Hashes, h)
		}
		b.Proofs = append(b.Proofs, string(tp.Marshal()))
	}
	if remembered != nil {
		old, err := tlog.ParseCheckpoint(remembered, st.Log.Origin, lv)
		if err != nil {
			return nil, fmt.Errorf("the checkpoint remembered: %w", err)
		}
		if old.Size > cp.Size {
			return nil, fmt.Errorf("%w: CAS's statement shows %s, smaller than %s, seen before", tlog.ErrInconsistent, cp, old)
		}
		b.Remembered = string(remembered)
		if old.Size > 0 && old.Size < cp.Size {
			p, err := tlog.ConsistencyFromTiles(old, cp, fetch)
			if err != nil {
				return nil, err
			}
			for _, h := range p {
				b.Consistency = append(b.Consistency, h[:])
			}
		}
	}
	return b, nil
}
