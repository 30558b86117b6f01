package core

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/secret"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// registered is a policy's current version.
type registered struct {
	Version int    `json:"version"`
	Digest  string `json:"digest"`
	// Predecessor is the digest of the version before, as its owners
	// signed it; empty for version 1 and for versions signed before links.
	Predecessor string `json:"predecessor,omitempty"`
	// Sealed: a version of the policy came encrypted, so its owners want
	// it read by nobody else, and no later version may say read: any.
	Sealed bool          `json:"sealed,omitempty"`
	Signed policy.Signed `json:"signed"`
	doc    *policy.Document
	// owners names (fingerprints) doc's owner keys, read once: every
	// attestation's result carries them.
	owners []string
}

// withDoc sets r's parsed document and what is read from it once.
func (r *registered) withDoc(d *policy.Document) *registered {
	r.doc, r.owners = d, nil
	if keys, err := d.OwnerKeys(); err == nil {
		for _, k := range keys {
			r.owners = append(r.owners, policy.Fingerprint(k))
		}
	}
	return r
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
	return r.withDoc(d), nil
}

// RegisterEncrypted opens a policy sealed to this CAS and registers it.
// Within a namespace (not ""), a policy named otherwise is refused.
func (c *CAS) RegisterEncrypted(e *policy.Encrypted, namespace string) (*wire.Registration, error) {
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
	return c.register(s, true, namespace)
}

// Register adds a policy or a new version of one. The signatures are
// checked first, against the owners entitled to approve the version they
// were made for: a new policy's own owners for version 1, the owners of
// version N-1 for version N. Only then is the link compared with what CAS
// holds: the next version is stored, the current one again is a no-op,
// an older one is superseded, and anything else is refused.
func (c *CAS) Register(s *policy.Signed) (*wire.Registration, error) { return c.register(s, false, "") }

// RegisterWithin is Register for a policy that must be named within
// namespace: the operator registers a SignedPolicy only under its
// Kubernetes namespace, so a tenant's resources name only its own.
func (c *CAS) RegisterWithin(s *policy.Signed, namespace string) (*wire.Registration, error) {
	return c.register(s, false, namespace)
}

// register registers s, which came encrypted if sealed, within namespace
// unless "".
func (c *CAS) register(s *policy.Signed, sealed bool, namespace string) (*wire.Registration, error) {
	doc, err := policy.Parse([]byte(s.Policy))
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %w", ErrInvalid, err)
	}
	if namespace != "" && !policy.Within(doc.Name, namespace) {
		return nil, fmt.Errorf("%w: policy %s is not named within namespace %s, the only one this request may register in "+
			"(a policy resource registers under its Kubernetes namespace): name it %s/NAME", ErrInvalid, doc.Name, namespace, namespace)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// The checks run under the registration lock; the secrets the version
	// needs are made outside it and outside any transaction (an RSA key
	// takes up to seconds), then the checks run again and the version is
	// stored with them.
	var made map[string]*secret.Material
	for range maxSecretRounds {
		reg, need, err := c.registerOnce(doc, s, sealed, made)
		if errors.Is(err, store.ErrConflict) {
			// Another replica stored a change first; this one is decided
			// again on the state as it now is (the store took it in).
			continue
		}
		if err != nil {
			return reg, err
		}
		if len(need) == 0 {
			// The new checkpoint goes to the witnesses before the owner
			// hears it was registered; a witness away delays, never
			// refuses, it (Witness tries again).
			c.Witness(context.Background())
			return reg, nil
		}
		if made, err = c.makeSecrets(doc, need); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: policy %s: CAS's state changed while this registration was decided, %d times (its secrets, or another replica's changes): register it again", ErrConflict, doc.Name, maxSecretRounds)
}

// maxSecretRounds bounds how often a registration is decided again
// because the state changed meanwhile: its stored secrets (a concurrent
// registration of the same policy), or anything another replica of CAS
// stored first.
const maxSecretRounds = 3

// registerOnce checks and stores s under the registration lock, with
// the secret material made; or, when the version needs material made
// lacks, names those secrets and stores nothing.
func (c *CAS) registerOnce(doc *policy.Document, s *policy.Signed, sealed bool, made map[string]*secret.Material) (*wire.Registration, []*policy.Secret, error) {
	// One registration at a time; attestations go on meanwhile.
	c.regMu.Lock()
	defer c.regMu.Unlock()
	if err := c.sync(); err != nil {
		return nil, nil, err
	}
	c.mu.RLock()
	k, err := c.ready()
	var current *registered
	var at uint64
	if err == nil {
		current, at = k.policies[doc.Name], k.generation
	}
	c.mu.RUnlock()
	if err != nil {
		return nil, nil, err
	}
	digest := doc.Digest()
	refuse := func(err error) (*wire.Registration, []*policy.Secret, error) {
		c.cfg.Log.Warn("audit: policy refused", "policy", doc.Name, "version", s.Version, "digest", digest, "reason", err.Error())
		c.cfg.Metrics.policyChanges.WithLabelValues("refused").Inc()
		return nil, nil, err
	}
	held := 0
	if current != nil {
		held = current.Version
	}
	if s.Version > held+1 {
		return refuse(fmt.Errorf("%w: policy %s is signed as version %d, but CAS holds %s: sign it as version %d%s",
			ErrConflict, doc.Name, s.Version, describe(current), held+1, after(current)))
	}
	signers, err := c.authorize(k, doc, s, current)
	if err != nil {
		return refuse(err)
	}
	if !c.cfg.AllowSimulation {
		if err := hardwareOnly(doc); err != nil {
			return refuse(err)
		}
	}
	if doc.ReadableByAnyone() && (sealed || (current != nil && current.Sealed)) {
		return refuse(fmt.Errorf("%w: policy %s: read: any, but the policy came encrypted, so only its owners may read it: remove read: any",
			ErrInvalid, doc.Name))
	}
	if s.Version <= held {
		reg, err := c.earlier(k, doc, s, current, func(err error) (*wire.Registration, error) {
			_, _, err = refuse(err)
			return nil, err
		})
		return reg, nil, err
	}
	c.mu.RLock()
	err = certificateNames(k.policies, doc, k.board.approvedBy(signers))
	if err == nil && current == nil {
		err = c.quota(k.policies, doc.Name)
	}
	c.mu.RUnlock()
	if err != nil {
		return refuse(err)
	}
	if current != nil && s.Predecessor != current.Digest {
		return refuse(fmt.Errorf("%w: policy %s version %d is signed to replace %q, but CAS's version %d is %s: sign it again%s",
			ErrConflict, doc.Name, s.Version, s.Predecessor, held, current.Digest, after(current)))
	}
	need, err := c.secretsToMake(k, doc, made)
	if err != nil || len(need) > 0 {
		return nil, need, err
	}
	reg, err := c.store(k, at, doc, s, current, sealed, made)
	return reg, nil, err
}

// store appends the next version to the policy's history.
func (c *CAS) store(k *keys, at uint64, doc *policy.Document, s *policy.Signed, current *registered, sealed bool, made map[string]*secret.Material) (*wire.Registration, error) {
	digest := doc.Digest()
	r := (&registered{Version: s.Version, Digest: digest, Predecessor: s.Predecessor, Signed: *s,
		Sealed: sealed || (current != nil && current.Sealed)}).withDoc(doc)
	// The history keeps the document as its author wrote it, unless it
	// holds plain secret values: then the canonical form without them,
	// so that no read of the history can ever return one.
	text := s.Policy
	redacted, removed := doc.Redacted()
	if removed {
		text = string(redacted.Canonical())
	}
	rec := wire.Record{Name: doc.Name, Version: s.Version, Digest: digest, Predecessor: s.Predecessor,
		Policy: text, PolicyHash: wire.HashText(text), Redacted: removed, Read: doc.ReadAccess(),
		Signatures: s.Signatures, Time: c.cfg.Clock.Now().UTC()}
	gen, err := k.enc.Update(c.cfg.Store, at, func(etx store.Tx) error {
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
		if err := putSecrets(etx, doc, made); err != nil {
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
		// In the transparency log, in the same transaction.
		return appendLog(etx, tlog.Entry{Type: tlog.PolicyVersion, Policy: tlog.NameHash(doc.Name), Version: r.Version, Digest: digest,
			Predecessor: s.Predecessor, Record: rec.Hash()})
	})
	if err != nil {
		return nil, fmt.Errorf("storing policy %s: %w", doc.Name, err)
	}
	c.mu.Lock()
	// Into the keys CAS serves now, unless they were read after this
	// commit (refresh) and hold it already.
	if cur := c.keys; cur != nil && cur.generation < gen {
		cur.policies[doc.Name] = r
		cur.generation = gen
		c.raiseMark(cur, gen)
		c.cfg.Metrics.policies.Set(float64(len(cur.policies)))
	}
	c.mu.Unlock()
	c.cfg.Metrics.policyChanges.WithLabelValues("accepted").Inc()
	c.cfg.Log.Info("audit: policy registered", "policy", doc.Name, "version", r.Version, "digest", digest, "signers", signerList(s.Signatures))
	return &wire.Registration{Name: doc.Name, Version: r.Version, Digest: digest, Predecessor: r.Predecessor}, nil
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

// current is a registered policy's current version, with the keys.
func (c *CAS) current(name string) (*keys, *registered, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return nil, nil, err
	}
	current := k.policies[name]
	if current == nil {
		return nil, nil, fmt.Errorf("%w: policy %q", ErrNotFound, name)
	}
	return k, current, nil
}

// versions reads a policy's history: all of it, or only the current
// version.
func (c *CAS) versions(name string, currentOnly bool) ([]wire.Record, error) {
	k, current, err := c.current(name)
	if err != nil {
		return nil, err
	}
	from := 1
	if currentOnly {
		from = current.Version
	}
	return c.history(k, name, from, current.Version)
}

// history reads versions from..to of a policy's history in a read
// transaction of its own.
func (c *CAS) history(k *keys, name string, from, to int) (out []wire.Record, err error) {
	err = k.enc.View(c.cfg.Store, func(etx store.Tx) error {
		out, err = records(etx, name, from, to)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading policy %s versions %d..%d: %w", name, from, to, err)
	}
	return out, nil
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
