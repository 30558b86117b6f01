package core

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"sync"

	"github.com/cloister-cc/cloister/internal/cas/pki"
)

// serverCert is the replica's own server certificate (pki.IssueServer):
// a key of this process, in memory only, and its certificate, issued
// again when a third of its life is left or CAS's CAs changed.
type serverCert struct {
	mu   sync.Mutex
	key  *ecdsa.PrivateKey
	cert *tls.Certificate
	// root is the root CA it chains to.
	root []byte
}

// ServerCertificate is the certificate CAS answers with to a TLS client
// that asks for name, its trust domain: a workload (such as a Vault's
// transit seal) that trusts CAS's root CA and checks that name reaches
// any ready replica of this CAS and nobody else, since no workload
// certificate may carry a name of that domain. Not ready, or another
// name: an error, and the handshake fails.
func (c *CAS) ServerCertificate(name string) (*tls.Certificate, error) {
	c.mu.RLock()
	k, err := c.ready()
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	a := k.authority
	if name != a.TrustDomain() {
		return nil, fmt.Errorf("%w: no server name %q here: this CAS is %s", ErrNotFound, name, a.TrustDomain())
	}
	s := &c.server
	s.mu.Lock()
	defer s.mu.Unlock()
	now := c.cfg.Clock.Now()
	if s.cert != nil && string(s.root) == string(a.Root.Cert.Raw) && now.Before(s.cert.Leaf.NotAfter.Add(-pki.ServerValidity/3)) {
		return s.cert, nil
	}
	if s.key == nil {
		if s.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, err
		}
	}
	leaf, err := a.IssueServer(&s.key.PublicKey, now)
	if err != nil {
		return nil, err
	}
	s.cert = &tls.Certificate{Certificate: [][]byte{leaf.Raw, a.Intermediate.Cert.Raw}, PrivateKey: s.key, Leaf: leaf}
	s.root = a.Root.Cert.Raw
	return s.cert, nil
}
