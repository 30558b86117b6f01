package core

import (
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// registered is a policy's current version.
type registered struct {
	Version int           `json:"version"`
	Digest  string        `json:"digest"`
	Signed  policy.Signed `json:"signed"`
	doc     *policy.Document
}

func decodeRegistered(raw []byte) (*registered, error) {
	var r registered
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	d, err := policy.Parse([]byte(r.Signed.Policy))
	if err != nil {
		return nil, err
	}
	r.doc = d
	return &r, nil
}

// RegisterEncrypted opens a policy sealed to this CAS and registers it.
func (c *CAS) RegisterEncrypted(e *policy.Encrypted) (*wire.Registration, error) {
	c.mu.RLock()
	k, err := c.ready()
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	s, err := policy.Decrypt(e, k.encryption)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return c.Register(s)
}

// Register adds a policy or a new version of one. A new name needs the
// threshold of its own owners' signatures; a change needs the threshold
// of the current version's owners; the same content again is a no-op.
func (c *CAS) Register(s *policy.Signed) (*wire.Registration, error) {
	doc, err := policy.Parse([]byte(s.Policy))
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %w", ErrInvalid, err)
	}
	// One registration at a time; attestations go on meanwhile.
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.mu.RLock()
	k, err := c.ready()
	var current *registered
	if err == nil {
		current = k.policies[doc.Name]
	}
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	digest := doc.Digest()
	if current != nil && current.Digest == digest {
		return &wire.Registration{Name: doc.Name, Version: current.Version, Digest: digest, Unchanged: true}, nil
	}
	if err := authorize(doc, s.Signatures, current); err != nil {
		c.cfg.Log.Warn("audit: policy refused", "policy", doc.Name, "digest", digest, "reason", err.Error())
		c.cfg.Metrics.policyChanges.WithLabelValues("refused").Inc()
		return nil, err
	}
	r := &registered{Version: 1, Digest: digest, Signed: *s, doc: doc}
	rec := wire.Record{Name: doc.Name, Version: 1, Digest: digest, Policy: s.Policy, Signatures: s.Signatures, Time: c.cfg.Clock.Now().UTC()}
	if current != nil {
		r.Version = current.Version + 1
		rec.Version = r.Version
	}
	err = c.cfg.Store.Update(func(tx store.Tx) error {
		etx := k.enc.Tx(tx)
		if current != nil {
			prev, err := records(etx, doc.Name, current.Version, current.Version)
			if err != nil {
				return err
			}
			rec.Previous = prev[0].Hash()
		}
		h, _ := hex.DecodeString(rec.Hash())
		sig, err := ecdsa.SignASN1(rand.Reader, k.history, h)
		if err != nil {
			return err
		}
		rec.Signature = sig
		if err := ensureSecrets(etx, k, doc, c.cfg.Clock.Now()); err != nil {
			return err
		}
		for _, w := range []struct {
			bucket, key string
			value       any
		}{{bucketPolicies, doc.Name, r}, {bucketHistory, historyKey(doc.Name, r.Version), rec}} {
			raw, err := json.Marshal(w.value)
			if err != nil {
				return err
			}
			if err := etx.Put(w.bucket, w.key, raw); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storing policy %s: %w", doc.Name, err)
	}
	c.mu.Lock()
	k.policies[doc.Name] = r
	c.cfg.Metrics.policies.Set(float64(len(k.policies)))
	c.mu.Unlock()
	c.cfg.Metrics.policyChanges.WithLabelValues("accepted").Inc()
	c.cfg.Log.Info("audit: policy registered", "policy", doc.Name, "version", r.Version, "digest", digest, "signers", signerList(s.Signatures))
	return &wire.Registration{Name: doc.Name, Version: r.Version, Digest: digest}, nil
}

// authorize checks the signatures: of the current owners for a change,
// of the document's own owners for a new policy.
func authorize(doc *policy.Document, sigs []policy.Signature, current *registered) error {
	owners, what := doc, "its owners"
	if current != nil {
		owners, what = current.doc, fmt.Sprintf("the owners of version %d", current.Version)
		if owners.Immutable() {
			return fmt.Errorf("%w: policy %s has no owners, so version %d cannot be changed; register the new version under another name",
				ErrUnauthorized, doc.Name, current.Version)
		}
	} else if doc.Immutable() {
		// Nobody could sign it; registering it first is all anyone can do.
		return nil
	}
	keys, err := owners.OwnerKeys()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	signers, err := policy.Signers(doc, sigs, keys)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	if need := owners.OwnerThreshold(); len(signers) < need {
		return fmt.Errorf("%w: policy %s is signed by %d of %s, %d needed: collect more signatures (cloister policy sign on the SignedPolicy)",
			ErrUnauthorized, doc.Name, len(signers), what, need)
	}
	return nil
}

func historyKey(name string, version int) string {
	return name + "/" + fmt.Sprintf("%08d", version)
}

func signerList(sigs []policy.Signature) string {
	var out []string
	for _, s := range sigs {
		out = append(out, s.Signer)
	}
	return strings.Join(out, ",")
}

// Policy returns the current version of a policy.
func (c *CAS) Policy(name string) (*wire.Record, error) {
	h, err := c.versions(name, true)
	if err != nil {
		return nil, err
	}
	return &h[0], nil
}

// History returns every version of a policy, oldest first.
func (c *CAS) History(name string) ([]wire.Record, error) { return c.versions(name, false) }

// versions reads a policy's history: all of it, or only the current
// version.
func (c *CAS) versions(name string, currentOnly bool) ([]wire.Record, error) {
	c.mu.RLock()
	k, err := c.ready()
	var current *registered
	if err == nil {
		current = k.policies[name]
	}
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	if current == nil {
		return nil, fmt.Errorf("%w: policy %q", ErrNotFound, name)
	}
	from := 1
	if currentOnly {
		from = current.Version
	}
	var out []wire.Record
	err = c.cfg.Store.View(func(tx store.Tx) error {
		out, err = records(k.enc.Tx(tx), name, from, current.Version)
		return err
	})
	return out, err
}

// records reads versions from..to of a policy's history.
func records(etx store.Tx, name string, from, to int) ([]wire.Record, error) {
	var out []wire.Record
	for v := from; v <= to; v++ {
		raw, err := etx.Get(bucketHistory, historyKey(name, v))
		if err != nil {
			return nil, err
		}
		var r wire.Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("history of %s, version %d: %w", name, v, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// HistoryKey is the public key history records are signed with.
func (c *CAS) HistoryKey() (*ecdsa.PublicKey, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return nil, err
	}
	return &k.history.PublicKey, nil
}

// EncryptionKey is the key policies are sealed to (policy.EncodePublicKey
// form); it is derived from the seed, so it survives restarts.
func (c *CAS) EncryptionKey() (string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return "", err
	}
	return policy.EncodePublicKey(k.encryption.PublicKey()), nil
}
