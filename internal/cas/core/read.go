package core

import (
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// ChallengeTTL is how long a read challenge is accepted: long enough for
// an owner's client to sign it, short enough that a captured read request
// is soon worthless.
const ChallengeTTL = time.Minute

// challengeLen: expiry (8 bytes), randomness (16), HMAC-SHA256 (32).
const challengeLen = 8 + 16 + sha256.Size

// Challenge is a fresh value for an owner to sign in a read request. It
// is authenticated with a key derived from the seed rather than
// remembered, so every replica that holds the seed accepts it.
func (c *CAS) Challenge() (*wire.Challenge, error) {
	c.mu.RLock()
	k, err := c.ready()
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	expires := c.cfg.Clock.Now().Add(ChallengeTTL).UTC().Truncate(time.Second)
	b := make([]byte, 8+16, challengeLen)
	binary.BigEndian.PutUint64(b, uint64(expires.Unix())) //nolint:gosec // a time after 1970
	if _, err := rand.Read(b[8:]); err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, k.challenge)
	m.Write(b)
	b = m.Sum(b)
	return &wire.Challenge{Challenge: base64.RawURLEncoding.EncodeToString(b), Expires: expires}, nil
}

// checkChallenge says whether CAS made ch and it has not expired.
func (c *CAS) checkChallenge(k *keys, ch string) error {
	b, err := base64.RawURLEncoding.DecodeString(ch)
	if err != nil || len(b) != challengeLen {
		return fmt.Errorf("%w: challenge: not one this CAS made: ask for one (GET /v1/challenge)", ErrUnauthorized)
	}
	m := hmac.New(sha256.New, k.challenge)
	m.Write(b[:24])
	if !hmac.Equal(m.Sum(nil), b[24:]) {
		return fmt.Errorf("%w: challenge: not one this CAS made: ask for one (GET /v1/challenge)", ErrUnauthorized)
	}
	expires := time.Unix(int64(binary.BigEndian.Uint64(b[:8])), 0) //nolint:gosec // CAS wrote it
	if !c.cfg.Clock.Now().Before(expires) {
		return fmt.Errorf("%w: challenge: expired at %s: ask for a new one and sign it at once", ErrUnauthorized, expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// OwnerHistory is a policy's history with its documents, for a request
// signed by one of the current version's owners over a fresh challenge.
// Plain secret values are not in it: the history never holds them.
func (c *CAS) OwnerHistory(name string, req wire.ReadRequest) ([]wire.Record, error) {
	k, current, err := c.current(name)
	if err != nil {
		return nil, err
	}
	if err := c.checkChallenge(k, req.Challenge); err != nil {
		return nil, err
	}
	keys, err := current.doc.OwnerKeys()
	if err != nil {
		return nil, err
	}
	var owner *ecdsa.PublicKey
	for _, key := range keys {
		if policy.Fingerprint(key) == req.Signer {
			owner = key
		}
	}
	if owner == nil {
		c.cfg.Log.Warn("audit: policy read refused", "policy", name, "signer", req.Signer, "reason", "not an owner")
		return nil, fmt.Errorf("%w: signer %q is not an owner of policy %s version %d", ErrUnauthorized, req.Signer, name, current.Version)
	}
	sig, err := base64.StdEncoding.DecodeString(req.Signature)
	if err != nil || !ecdsa.VerifyASN1(owner, wire.ReadDigest(name, req.Challenge), sig) {
		c.cfg.Log.Warn("audit: policy read refused", "policy", name, "signer", req.Signer, "reason", "bad signature")
		return nil, fmt.Errorf("%w: signature: does not verify over policy %s and the challenge with %s's key", ErrUnauthorized, name, req.Signer)
	}
	c.cfg.Log.Info("audit: policy read", "policy", name, "signer", req.Signer)
	return c.History(name)
}
