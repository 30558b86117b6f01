// Package x509sign makes X.509 certificates and CSRs signed by a P-256
// key held in this process, with crypto/x509's encoding but without the
// check crypto/x509 makes of every signature it obtains. That check is for
// a crypto.Signer that may misbehave (an HSM, a remote key); for
// crypto/ecdsa's signature with its own in-memory key it costs an ECDSA
// verification, as much as the signature and the encoding together, and
// protects no more than it would for crypto/tls's handshake signatures,
// which are not checked either. CAS issues a certificate and every
// workload makes a CSR on each attestation, so the check is paid at every
// pod start.
package x509sign

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
)

// Certificate is x509.CreateCertificate(rand.Reader, tmpl, parent, pub,
// key) for a P-256 key: the same DER up to the signature.
func Certificate(tmpl, parent *x509.Certificate, pub any, key *ecdsa.PrivateKey) ([]byte, error) {
	return sign(key, func(t crypto.Signer) error {
		_, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, t)
		return err
	})
}

// CertificateRequest is x509.CreateCertificateRequest(rand.Reader, tmpl,
// key) for a P-256 key.
func CertificateRequest(tmpl *x509.CertificateRequest, key *ecdsa.PrivateKey) ([]byte, error) {
	return sign(key, func(t crypto.Signer) error {
		_, err := x509.CreateCertificateRequest(rand.Reader, tmpl, t)
		return err
	})
}

// sign has encode (x509) encode the to-be-signed part and hand it to a
// signer that keeps it and stops there; then signs it and wraps part,
// algorithm and signature as both certificates and CSRs are (RFC 5280
// 4.1, RFC 2986 4.2).
func sign(key *ecdsa.PrivateKey, encode func(crypto.Signer) error) ([]byte, error) {
	if key.Curve != elliptic.P256() {
		return nil, errors.New("x509sign: the key is not on P-256")
	}
	t := &taker{key: key}
	if err := encode(t); !errors.Is(err, errTaken) {
		if err == nil {
			err = errors.New("x509sign: x509 signed without its signer")
		}
		return nil, err
	}
	digest := sha256.Sum256(t.raw)
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		return nil, err
	}
	return asn1.Marshal(struct {
		TBS       asn1.RawValue
		Algorithm pkix.AlgorithmIdentifier
		Signature asn1.BitString
	}{asn1.RawValue{FullBytes: t.raw}, pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA256}, asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}})
}

// oidECDSAWithSHA256 is the signature algorithm x509 names in the
// to-be-signed part for a P-256 key (RFC 5758 3.2).
var oidECDSAWithSHA256 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}

// errTaken stops x509 once the signer has the to-be-signed part.
var errTaken = errors.New("x509sign: to-be-signed part taken")

// taker is a crypto.MessageSigner that keeps the message x509 asks it to
// sign and refuses to sign it.
type taker struct {
	key *ecdsa.PrivateKey
	raw []byte
}

func (t *taker) Public() crypto.PublicKey { return t.key.Public() }

func (t *taker) SignMessage(_ io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts.HashFunc() != crypto.SHA256 {
		return nil, fmt.Errorf("x509sign: x509 asked for %v, not SHA-256, for a P-256 key", opts.HashFunc())
	}
	t.raw = append([]byte(nil), msg...)
	return nil, errTaken
}

// Sign is never called: x509 passes a MessageSigner the message.
func (t *taker) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return nil, errors.New("x509sign: x509 asked to sign a digest, not the message")
}
