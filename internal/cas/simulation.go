package cas

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/atomicfile"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// A standalone simulated CAS's own simulation key, in its state folder:
// clients pin the public half (cloister --cas-sim-key).
const (
	SimulationKeyFile    = "simulation.key"
	SimulationPubKeyFile = "simulation.pub.pem"
)

// selfEvidenceValidity bounds how long one GET /v1/public-key's simulated
// evidence is taken: it is made afresh for every request.
const selfEvidenceValidity = 10 * time.Minute

// selfQuoter makes a simulated CAS's evidence for its TLS key, signed by
// the simulation key in file. The file is read again when it changes, so
// a key the operator replaces in its Secret is used without a restart.
type selfQuoter struct {
	file    string
	binding []byte // report data: the TLS key's binding

	mu  sync.Mutex
	raw []byte
	key *ecdsa.PrivateKey
}

func newSelfQuoter(file string, tlsKey *ecdsa.PrivateKey) (*selfQuoter, error) {
	binding, err := wire.KeyBinding(&tlsKey.PublicKey)
	if err != nil {
		return nil, err
	}
	q := &selfQuoter{file: file, binding: binding}
	if _, err := q.signer(); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *selfQuoter) signer() (*ecdsa.PrivateKey, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	raw, err := os.ReadFile(q.file)
	if err != nil {
		if q.key != nil {
			return q.key, nil // a Secret volume between two versions: keep the last key
		}
		return nil, fmt.Errorf("simulation key: %w", err)
	}
	if q.key != nil && bytes.Equal(raw, q.raw) {
		return q.key, nil
	}
	k, err := keyfile.ParsePrivate(raw)
	if err != nil {
		return nil, fmt.Errorf("simulation key %s: %w", q.file, err)
	}
	q.raw, q.key = raw, k
	return k, nil
}

// Evidence is CAS's simulated evidence, made now.
func (q *selfQuoter) Evidence() (*attest.Evidence, error) { return q.evidenceOver(q.binding) }

// public is the simulation key's public half.
func (q *selfQuoter) public() (*ecdsa.PublicKey, error) {
	k, err := q.signer()
	if err != nil {
		return nil, err
	}
	return &k.PublicKey, nil
}

// evidenceOver is simulated evidence over report data, made now.
func (q *selfQuoter) evidenceOver(binding []byte) (*attest.Evidence, error) {
	k, err := q.signer()
	if err != nil {
		return nil, err
	}
	// Valid from a minute ago: a client whose clock is a little behind
	// still takes it.
	raw, err := sim.Generate(k, attest.Claims{TCBStatus: attest.TCBUpToDate, ReportData: binding}, time.Now().Add(-time.Minute), selfEvidenceValidity)
	if err != nil {
		return nil, err
	}
	return &attest.Evidence{Type: attest.Sim, Raw: raw}, nil
}

// ownSimulationKey makes the state folder's simulation key unless it is
// there, and writes its public half beside it for clients to pin.
func ownSimulationKey(dir string) (keyFile, pubFile string, err error) {
	keyFile, pubFile = filepath.Join(dir, SimulationKeyFile), filepath.Join(dir, SimulationPubKeyFile)
	k, err := keyfile.LoadOrCreate(keyFile)
	if err != nil {
		return "", "", fmt.Errorf("simulation key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return "", "", err
	}
	if _, err := atomicfile.WriteIfChanged(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return "", "", fmt.Errorf("simulation key: %w", err)
	}
	return keyFile, pubFile, nil
}

// pemKeys is a file, or a folder of files, of PEM public keys. Text
// between the PEM blocks (a comment naming the key) is skipped.
type pemKeys string

// simKeysFresh is how long the pinned simulation keys are kept once read:
// a key added to (or taken from) the mounted ConfigMap counts within it,
// and a burst of attestations reads the files once, not once each.
const simKeysFresh = time.Second

// freshKeys reads keys at most once per simKeysFresh.
type freshKeys struct {
	files pemKeys
	now   func() time.Time
	mu    sync.Mutex
	read  time.Time
	keys  []*ecdsa.PublicKey
	err   error
}

func (f *freshKeys) Keys() ([]*ecdsa.PublicKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.now(); f.read.IsZero() || now.Sub(f.read) >= simKeysFresh || now.Before(f.read) {
		f.keys, f.err = f.files.Keys()
		f.read = now
	}
	return f.keys, f.err
}

// Fingerprints names the pinned keys as CAS reports them, read afresh.
func (f *freshKeys) Fingerprints() ([]string, error) { return f.files.Fingerprints() }

func (p pemKeys) Keys() ([]*ecdsa.PublicKey, error) {
	files := []string{string(p)}
	if entries, err := os.ReadDir(string(p)); err == nil {
		files = files[:0]
		for _, e := range entries {
			// A mounted ConfigMap's own ..data links start with a dot.
			if !strings.HasPrefix(e.Name(), ".") && !e.IsDir() {
				files = append(files, filepath.Join(string(p), e.Name()))
			}
		}
	}
	var keys []*ecdsa.PublicKey
	for _, f := range files {
		rest, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // an optional ConfigMap not made yet: no keys
		}
		if err != nil {
			return nil, err
		}
		for {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			k, err := keyfile.ParsePublic(pem.EncodeToMemory(block))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// Fingerprints names the pinned keys as CAS reports them.
func (p pemKeys) Fingerprints() ([]string, error) {
	keys, err := p.Keys()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = sim.Fingerprint(k)
	}
	return out, nil
}

// simulatedSealingKey derives node's sealing key from the simulation key
// in file: a stand-in for a TEE's sealing key, which protects nothing
// (whoever reads the simulation key derives every node's).
func simulatedSealingKey(file, node string) func() ([]byte, error) {
	return func() ([]byte, error) {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("simulation key: %w", err)
		}
		k, err := keyfile.ParsePrivate(raw)
		if err != nil {
			return nil, fmt.Errorf("simulation key %s: %w", file, err)
		}
		d, err := k.Bytes()
		if err != nil {
			return nil, err
		}
		return hkdf.Key(sha256.New, d, nil, "cloister-cas simulated sealing key for node "+node, 32)
	}
}
