package witness

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
)

// Files in a witness's folder.
const (
	KeyFile      = "witness.key"  // its signing key (signed-note private key)
	VerifierFile = "witness.vkey" // its cosignature/v1 verifier key, for logs' clients
	stateDir     = "logs"         // per log: the last checkpoint it cosigned
	conflictDir  = "conflicts"    // per refusal of a fork: both checkpoints
)

// Key loads the witness's key from dir, making one named name when there
// is none, and returns its signer and the cosignature/v1 verifier key
// that clients require.
func Key(dir, name string) (*fnote.Signer, string, error) {
	file := filepath.Join(dir, KeyFile)
	skey, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		var vkey string
		s, v, gerr := note.GenerateKey(rand.Reader, name)
		if gerr != nil {
			return nil, "", gerr
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, "", err
		}
		if err := atomicfile.WriteSynced(file, []byte(s+"\n"), 0o600); err != nil {
			return nil, "", fmt.Errorf("the witness key: %w", err)
		}
		if vkey, err = fnote.VKeyToCosignatureV1(v); err != nil {
			return nil, "", err
		}
		if err := atomicfile.WriteSynced(filepath.Join(dir, VerifierFile), []byte(vkey+"\n"), 0o644); err != nil {
			return nil, "", err
		}
		skey = []byte(s)
	} else if err != nil {
		return nil, "", fmt.Errorf("the witness key: %w", err)
	}
	signer, err := fnote.NewSignerForCosignatureV1(strings.TrimSpace(string(skey)))
	if err != nil {
		return nil, "", fmt.Errorf("the witness key %s: %w", file, err)
	}
	if name != "" && signer.Name() != name {
		return nil, "", fmt.Errorf("the witness key %s is named %q, not %q", file, signer.Name(), name)
	}
	vkey, err := os.ReadFile(filepath.Join(dir, VerifierFile))
	if err != nil {
		return nil, "", fmt.Errorf("the witness's verifier key: %w", err)
	}
	return signer, strings.TrimSpace(string(vkey)), nil
}

// Log is a log a witness cosigns for: its origin and its verifier key.
type Log struct {
	Origin   string
	Verifier note.Verifier
}

// ParseLog reads a Cloister log's verifier key (as GET /v1/log/key
// serves it); its origin is the key name's, as CAS names its log.
func ParseLog(vkey string) (Log, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return Log{}, fmt.Errorf("log key %q: %w", vkey, err)
	}
	return Log{Origin: tlog.Origin(v.Name()), Verifier: v}, nil
}

// Witness cosigns checkpoints of the logs it knows, each only when it
// is consistent with the last one it cosigned for that log.
type Witness struct {
	dir    string
	signer note.Signer
	logs   map[string]note.Verifier
	log    *slog.Logger
	now    func() time.Time

	mu sync.Mutex // one checkpoint at a time: check, persist, cosign
}

// New is a witness keeping its state in dir (made by Key).
func New(dir string, signer note.Signer, logs []Log, log *slog.Logger) (*Witness, error) {
	w := &Witness{dir: dir, signer: signer, logs: map[string]note.Verifier{}, log: log, now: time.Now}
	for _, l := range logs {
		if _, dup := w.logs[l.Origin]; dup {
			return nil, fmt.Errorf("log %s named twice", l.Origin)
		}
		w.logs[l.Origin] = l.Verifier
	}
	for _, d := range []string{stateDir, conflictDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Refusal is why a witness did not cosign, with the HTTP status the
// protocol gives it; Size is the size it holds (with 409).
type Refusal struct {
	Status int
	Size   int64
	Reason string
}

func (r *Refusal) Error() string { return r.Reason }

func refuse(status int, format string, a ...any) *Refusal {
	return &Refusal{Status: status, Reason: fmt.Sprintf(format, a...)}
}

// Add cosigns req's checkpoint if its log is known, its signature holds,
// OldSize is the size this witness holds and the proof shows the
// checkpoint extends the one it holds; it returns the cosignature lines.
// The checkpoint is kept durably before the cosignature is returned.
func (w *Witness) Add(req Request) ([]byte, error) {
	origin, _, _ := strings.Cut(string(req.Checkpoint), "\n")
	v, ok := w.logs[origin]
	if !ok {
		return nil, refuse(404, "log %q is not one this witness cosigns for", origin)
	}
	n, err := note.Open(req.Checkpoint, note.VerifierList(v))
	if err != nil {
		return nil, refuse(403, "the checkpoint does not carry the log's signature: %v", err)
	}
	cp, err := tlog.ParseCheckpoint(req.Checkpoint, origin, v)
	if err != nil {
		return nil, refuse(400, "%v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	held, err := w.held(origin, v)
	if err != nil {
		return nil, err
	}
	switch {
	case req.OldSize != held.Size:
		return nil, &Refusal{Status: 409, Size: held.Size, Reason: fmt.Sprintf("this witness holds size %d of %s, not %d", held.Size, origin, req.OldSize)}
	case cp.Size < req.OldSize:
		return nil, refuse(400, "a checkpoint of size %d, smaller than the old size %d", cp.Size, req.OldSize)
	case (req.OldSize == 0 || req.OldSize == cp.Size) && len(req.Proof) != 0:
		return nil, refuse(400, "a consistency proof where none is due (old size %d, new size %d)", req.OldSize, cp.Size)
	}
	if err := tlog.VerifyConsistency(held, cp, req.Proof); err != nil {
		w.conflict(held, cp)
		if held.Size == cp.Size {
			return nil, &Refusal{Status: 409, Size: held.Size, Reason: err.Error()}
		}
		return nil, refuse(422, "%v", err)
	}
	if held.Size == 0 || cp.Size > held.Size {
		if err := atomicfile.WriteSynced(w.stateFile(origin), req.Checkpoint, 0o600); err != nil {
			return nil, fmt.Errorf("keeping %s: %w", cp, err)
		}
	}
	signed, err := note.Sign(&note.Note{Text: n.Text}, w.signer)
	if err != nil {
		return nil, err
	}
	return signed[len(n.Text)+1:], nil
}

// held is the checkpoint this witness last cosigned for origin (size 0
// when none).
func (w *Witness) held(origin string, v note.Verifier) (tlog.Checkpoint, error) {
	raw, err := os.ReadFile(w.stateFile(origin))
	if errors.Is(err, fs.ErrNotExist) {
		return tlog.Checkpoint{Origin: origin}, nil
	}
	if err != nil {
		return tlog.Checkpoint{}, fmt.Errorf("the checkpoint held for %s: %w", origin, err)
	}
	cp, err := tlog.ParseCheckpoint(raw, origin, v)
	if err != nil {
		return tlog.Checkpoint{}, fmt.Errorf("the checkpoint held for %s: %w", origin, err)
	}
	return cp, nil
}

func (w *Witness) stateFile(origin string) string {
	h := sha256.Sum256([]byte(origin))
	return filepath.Join(w.dir, stateDir, hex.EncodeToString(h[:16]))
}

// conflict keeps both checkpoints of a refused fork or rollback, each
// signed by the log: proof, to anyone, that the log misbehaved.
func (w *Witness) conflict(held, got tlog.Checkpoint) {
	w.log.Error("REFUSED: the log shows a checkpoint inconsistent with one this witness cosigned (rolled back, or two histories)",
		"log", held.Origin, "held", held.String(), "got", got.String())
	name := fmt.Sprintf("%s-%d", w.now().UTC().Format("20060102T150405Z"), got.Size)
	data := bytes.Join([][]byte{held.Note, got.Note}, []byte("\n"))
	if err := atomicfile.WriteSynced(filepath.Join(w.dir, conflictDir, name), data, 0o600); err != nil {
		w.log.Error("keeping the conflicting checkpoints", "err", err)
	}
}

// NewVerifier reads a witness's cosignature/v1 verifier key.
func NewVerifier(vkey string) (note.Verifier, error) {
	v, err := fnote.NewVerifierForCosignatureV1(vkey)
	if err != nil {
		return nil, fmt.Errorf("witness key %q: %w", vkey, err)
	}
	return v, nil
}
