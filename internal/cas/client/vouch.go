package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Vouch is what a client learnt of CAS from POST /v1/evidence.
type Vouch struct {
	// Statement is CAS's statement over the client's nonce.
	Statement *wire.Statement
	// Claims are the claims of the evidence that binds the key that
	// signed it; Insecure when simulated.
	Claims *attest.Claims
}

// VerifyVouched checks an answer of POST /v1/evidence to nonce: the
// statement answers nonce, is signed by the key it names, and the
// evidence binds that key and meets expect. It needs no connection:
// an auditor re-checks an answer kept in a bundle with it.
func VerifyVouched(v *wire.Vouched, nonce []byte, expect Expect) (*Vouch, error) {
	st, key, err := v.Open(nonce)
	if err != nil {
		return nil, err
	}
	if v.TLSCertificate != "" {
		block, _ := pem.Decode([]byte(v.TLSCertificate))
		if block == nil {
			return nil, errors.New("tlsCertificate: not PEM")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tlsCertificate: %w", err)
		}
		if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(key) {
			return nil, errors.New("tlsCertificate: not of the key that signed the statement")
		}
	}
	binding, err := wire.KeyBinding(key)
	if err != nil {
		return nil, err
	}
	claims, err := checkEvidence(&v.Identity, binding, expect)
	if err != nil {
		return nil, fmt.Errorf("the evidence of the key that signed CAS's statement: %w", err)
	}
	return &Vouch{Statement: st, Claims: claims}, nil
}

// NewVouched connects to CAS at baseURL through whatever terminates TLS
// there (a proxy, an ingress: caPEM, or the system's roots when nil),
// asks CAS for its statement over a fresh nonce and verifies it
// (VerifyVouched). The client then trusts only what that statement
// names: CAS's log key, history key, CAs and encryption key; answers
// that name others are refused.
func NewVouched(ctx context.Context, baseURL string, caPEM []byte, expect Expect, dial DialFunc) (*Client, *Vouch, *wire.Vouched, error) {
	if err := checkURL(baseURL); err != nil {
		return nil, nil, nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caPEM != nil {
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(caPEM) {
			return nil, nil, nil, errors.New("the proxy's CA bundle: no PEM certificate in it")
		}
	}
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), http: newHTTP(cfg, dial)}
	nonce := make([]byte, 32)
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, nil, err
	}
	v, err := c.Evidence(ctx, nonce)
	if err != nil {
		return nil, nil, nil, err
	}
	vouch, err := VerifyVouched(v, nonce, expect)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("attesting CAS %s by its statement: %w", baseURL, err)
	}
	c.vouched = vouch.Statement
	return c, vouch, v, nil
}

// errNotVouched names what an answer claims that CAS's statement did not.
func errNotVouched(what string) error {
	return fmt.Errorf("CAS answered with another %s than the one its attested statement names: something between this client and CAS substitutes answers", what)
}
