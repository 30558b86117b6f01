package audit

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/transparency-dev/formats/proof"
	"golang.org/x/mod/sumdb/note"
	sumtlog "golang.org/x/mod/sumdb/tlog"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/cas/witness"
)

// Claim is one thing a bundle shows, and why it does not hold (Err).
type Claim struct {
	Name   string
	Detail string
	Err    error
}

// Options are the auditor's own: what CAS must be, which witnesses must
// have cosigned, and when.
type Options struct {
	// Expect is what CAS's evidence must meet; its Verify.At is set to At.
	Expect casclient.Expect
	// Witnesses, when not nil, must have cosigned the checkpoint, within
	// MaxAge of the statement (0: any age).
	Witnesses *witness.Policy
	MaxAge    time.Duration
	// At is when the evidence is judged; zero: the statement's time.
	At time.Time
	// Digest, when set, is the manifest the auditor expects current.
	Digest string
}

// errUnchecked: a claim that rests on another that failed.
var errUnchecked = errors.New("not checked: it rests on CAS's statement, which failed")

// Check checks every claim of b; all hold when none has an Err.
func Check(b *Bundle, o Options) []Claim {
	var out []Claim
	claim := func(name, detail string, err error) { out = append(out, Claim{Name: name, Detail: detail, Err: err}) }

	st, claims, err := statement(b, o)
	if err != nil {
		claim("cas-statement", "", err)
		claim("manifest-history", "", errUnchecked)
		claim("checkpoint", "", errUnchecked)
		return out
	}
	kind := string(claims.Type)
	if claims.Insecure {
		kind += " (simulated: INSECURE)"
	}
	claim("cas-statement", fmt.Sprintf("CAS's statement at %s over the bundle's nonce, signed by the key its %s evidence binds", st.Time.Format(time.RFC3339), kind), nil)

	claim("manifest-history", historyDetail(b), history(b, st))

	cp, v, err := checkpoint(st)
	claim("checkpoint", cp.String(), err)
	if err != nil {
		return out
	}
	switch {
	case o.Witnesses == nil:
		claim("witnesses", "no witness policy given: cosignatures not required", nil)
	case !o.Witnesses.Satisfied(cp.Note):
		claim("witnesses", "", errors.New("the checkpoint lacks the cosignatures the witness policy requires"))
	case o.MaxAge > 0 && !o.Witnesses.SatisfiedSince(cp.Note, st.Time.Add(-o.MaxAge)):
		claim("witnesses", "", fmt.Errorf("the checkpoint lacks cosignatures made within %s of CAS's statement", o.MaxAge))
	default:
		claim("witnesses", "cosigned as the witness policy requires", nil)
	}
	if len(b.Proofs) != len(b.Records) {
		claim("log-inclusion", "", fmt.Errorf("%d inclusion proofs for %d versions", len(b.Proofs), len(b.Records)))
	} else {
		for i, r := range b.Records {
			idx, err := included(cp, r, b.Proofs[i])
			claim(fmt.Sprintf("log-inclusion v%d", r.Version), fmt.Sprintf("entry %d", idx), err)
		}
	}
	claim("consistency", consistencyDetail(b), consistent(b, st.Log.Origin, v, cp))
	if o.Digest != "" {
		var err error
		if n := len(b.Records); n == 0 || b.Records[n-1].Digest != o.Digest {
			err = fmt.Errorf("the current version is not the manifest %s", o.Digest)
		}
		claim("manifest-current", o.Digest, err)
	}
	return out
}

func statement(b *Bundle, o Options) (*wire.Statement, *attest.Claims, error) {
	at := o.At
	if at.IsZero() {
		// The statement's own time, read before it is trusted: it only
		// says when the evidence is judged, which the evidence bounds.
		if st, _, err := b.CAS.Open(b.Nonce); err == nil {
			at = st.Time
		}
	}
	if ev := b.CAS.Evidence; ev != nil && !bytes.Equal(verify.Decode(ev.Raw), ev.Raw) {
		return nil, nil, errors.New("CAS's evidence is not kept decoded, as cloister verify writes it")
	}
	e := o.Expect
	e.Verify.At = at
	v, err := casclient.VerifyVouched(&b.CAS, b.Nonce, e)
	if err != nil {
		return nil, nil, err
	}
	if v.Statement.State != string(wire.Ready) || v.Statement.Log == nil || v.Statement.HistoryKey == "" {
		return nil, nil, fmt.Errorf("CAS was %s, not ready, when it made the statement", v.Statement.State)
	}
	return v.Statement, v.Claims, nil
}

func historyDetail(b *Bundle) string {
	if n := len(b.Records); n > 0 {
		return fmt.Sprintf("%d versions of %s, the current %s", n, b.Manifest, b.Records[n-1].Digest)
	}
	return ""
}

func history(b *Bundle, st *wire.Statement) error {
	if len(b.Records) == 0 {
		return errors.New("no versions")
	}
	for _, r := range b.Records {
		if r.Name != b.Manifest {
			return fmt.Errorf("version %d is of %q, not %q", r.Version, r.Name, b.Manifest)
		}
	}
	key, err := policy.ParsePublicKey([]byte(st.HistoryKey))
	if err != nil {
		return fmt.Errorf("CAS's history key: %w", err)
	}
	return wire.VerifyHistory(b.Records, key)
}

// checkpoint is the statement's checkpoint, checked with the log key it
// names, and that key's verifier.
func checkpoint(st *wire.Statement) (tlog.Checkpoint, note.Verifier, error) {
	v, err := note.NewVerifier(st.Log.Key)
	if err != nil {
		return tlog.Checkpoint{}, nil, fmt.Errorf("CAS's log key: %w", err)
	}
	cp, err := tlog.ParseCheckpoint([]byte(st.Checkpoint), st.Log.Origin, v)
	return cp, v, err
}

// included checks text, a C2SP tlog-proof, proves r's entry in cp.
func included(cp tlog.Checkpoint, r wire.Record, text string) (int64, error) {
	var p proof.TLogProof
	if err := p.Unmarshal([]byte(text)); err != nil {
		return 0, err
	}
	if !bytes.Equal(p.Marshal(), []byte(text)) {
		return 0, errors.New("the proof is not in its canonical form")
	}
	if !bytes.Equal(p.Checkpoint, cp.Note) {
		return 0, errors.New("the proof is into another checkpoint than CAS's statement's")
	}
	if p.ExtraData != nil || p.Index >= uint64(cp.Size) { //nolint:gosec // a checkpoint's size is not negative
		return 0, fmt.Errorf("entry %d is not in %s", p.Index, cp)
	}
	entry, err := casclient.EntryOf(r).Marshal()
	if err != nil {
		return 0, err
	}
	hashes := make(sumtlog.RecordProof, len(p.Hashes))
	for i, h := range p.Hashes {
		hashes[i] = h
	}
	idx := int64(p.Index) //nolint:gosec // below cp.Size, checked above
	return idx, tlog.VerifyInclusion(cp, idx, entry, hashes)
}

func consistencyDetail(b *Bundle) string {
	if b.Remembered == "" {
		return "the workspace had seen no checkpoint before"
	}
	return "extends the checkpoint the workspace saw before"
}

func consistent(b *Bundle, origin string, v note.Verifier, cp tlog.Checkpoint) error {
	if b.Remembered == "" {
		if len(b.Consistency) > 0 {
			return errors.New("a consistency proof without the checkpoint it starts from")
		}
		return nil
	}
	old, err := tlog.ParseCheckpoint([]byte(b.Remembered), origin, v)
	if err != nil {
		return fmt.Errorf("the checkpoint remembered: %w", err)
	}
	p := make(sumtlog.TreeProof, len(b.Consistency))
	for i, h := range b.Consistency {
		if len(h) != sumtlog.HashSize {
			return fmt.Errorf("consistency hash %d: %d bytes", i, len(h))
		}
		copy(p[i][:], h)
	}
	if old.Size == cp.Size || old.Size == 0 {
		if len(p) > 0 {
			return errors.New("a consistency proof where none is due")
		}
	}
	return tlog.VerifyConsistency(old, cp, p)
}
