package core

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/transit"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// TransitOp is an operation of the transit endpoint.
type TransitOp string

// The operations Vault's transit seal uses.
const (
	TransitEncrypt TransitOp = "encrypt"
	TransitDecrypt TransitOp = "decrypt"
)

// Transit answers a request of Vault's transit seal (body) for transit
// key name, from a client that presented certificate leaf on its TLS
// connection: leaf must be a workload certificate of this CAS, valid now,
// whose service (its mesh identity) has that key in its policy as it is
// now, and whose attested claims that policy still admits. The key of
// each version is derived from the seed, so any replica of CAS answers
// alike, and nothing stores it. Nothing of what is encrypted, nor the
// key, is logged.
func (c *CAS) Transit(leaf *x509.Certificate, op TransitOp, name string, body []byte) (*transit.Response, error) {
	res, err := c.transit(leaf, op, name, body)
	if op == TransitEncrypt || op == TransitDecrypt {
		result := "done"
		switch {
		case err == nil:
		case errors.Is(err, ErrRejected):
			result = "refused"
		case errors.Is(err, ErrInvalid):
			result = "invalid"
		case errors.Is(err, ErrNotFound):
			result = "not-found"
		default:
			result = "error"
		}
		c.cfg.Metrics.transit.WithLabelValues(string(op), result).Inc()
	}
	return res, err
}

func (c *CAS) transit(leaf *x509.Certificate, op TransitOp, name string, body []byte) (*transit.Response, error) {
	c.mu.RLock()
	k, err := c.ready()
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	id, svc, err := c.transitClient(k, leaf)
	if err != nil {
		return nil, err
	}
	tk := svc.TransitKey(name)
	if tk == nil {
		return nil, fmt.Errorf("%w: transit key %q of service %s of policy %s: add it to the service's transit.keys", ErrNotFound, name, id.Service, id.Policy)
	}
	ref := transit.KeyRef{Policy: id.Policy, Service: id.Service, Name: name}
	var res transit.Response
	switch op {
	case TransitEncrypt:
		plaintext, err := transit.DecodeEncrypt(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		ref.Version = tk.Version
		ct, err := transit.Encrypt(k.seed.Key(ref.Label(), transit.KeySize), ref, plaintext)
		if err != nil {
			return nil, err
		}
		res.Data = map[string]string{"ciphertext": ct}
	case TransitDecrypt:
		version, blob, err := transit.DecodeDecrypt(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if low := max(tk.MinDecryptionVersion, 1); version < low || version > tk.Version {
			return nil, fmt.Errorf("%w: transit key %q decrypts versions %d to %d, not %d", ErrRejected, name, low, tk.Version, version)
		}
		ref.Version = version
		plaintext, err := transit.Decrypt(k.seed.Key(ref.Label(), transit.KeySize), ref, blob)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		res.Data = map[string]string{"plaintext": base64.StdEncoding.EncodeToString(plaintext)}
	default:
		return nil, fmt.Errorf("%w: transit operation %q: use encrypt or decrypt", ErrInvalid, op)
	}
	c.cfg.Log.Info("audit: transit", "op", string(op), "policy", id.Policy, "service", id.Service, "key", name, "version", ref.Version)
	return &res, nil
}

// transitClient is the service a transit client's certificate names, when
// it is one of this CAS's workload certificates, valid now, and the
// service's policy still admits the claims it was issued for.
func (c *CAS) transitClient(k *keys, leaf *x509.Certificate) (wire.MeshID, *policy.Service, error) {
	refuse := func(format string, args ...any) (wire.MeshID, *policy.Service, error) {
		return wire.MeshID{}, nil, fmt.Errorf("%w: %w", ErrRejected, attest.Reject(attest.CheckIdentity, format, args...))
	}
	if leaf == nil {
		return refuse("transit: present the service's certificate from CAS on the TLS connection (Vault's tls_client_cert and tls_client_key)")
	}
	a := k.authority
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(a.Root.Cert)
	inter.AddCert(a.Intermediate.Cert)
	inter.AddCert(a.Mesh.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: c.cfg.Clock.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return refuse("transit: the client certificate is not a workload certificate of this CAS valid now: %v", err)
	}
	id, err := wire.CertMeshID(leaf)
	if err != nil || id.TrustDomain != a.TrustDomain() {
		return refuse("transit: the client certificate names no workload of this CAS: %v", err)
	}
	c.mu.RLock()
	reg := k.policies[id.Policy]
	c.mu.RUnlock()
	var svc *policy.Service
	if reg != nil {
		svc = reg.doc.Service(id.Service)
	}
	if svc == nil {
		return refuse("transit: service %s of policy %s is no longer registered", id.Service, id.Policy)
	}
	// The policy as it is now judges the claims the certificate was
	// issued for: a measurement the owners removed since is refused
	// before the certificate expires.
	raw, ok := pki.Claims(leaf)
	var claims attest.Claims
	if !ok || json.Unmarshal(raw, &claims) != nil {
		return refuse("transit: the client certificate carries no attested claims")
	}
	p := reg.doc.Policy(svc)
	err = p.Check(&claims)
	if err == nil && claims.Insecure && !c.cfg.AllowSimulation {
		err = errors.New("the certificate was issued for simulated evidence, which this CAS no longer accepts")
	}
	if err != nil {
		return refuse("transit: service %s of policy %s no longer admits the evidence its certificate was issued for: %v", id.Service, id.Policy, err)
	}
	return id, svc, nil
}
