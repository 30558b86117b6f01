package realnode

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is the cluster's certificate authority: the API server trusts client
// certificates it signed, and the kubelet's serving certificate signed by
// it is what the API server checks when it calls the kubelet.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	PEM  []byte
}

// LoadCA reads a CA certificate and its key (PKCS#1, PKCS#8 or SEC 1 PEM).
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s holds no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster CA key: %w", err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", keyFile, err)
	}
	return &CA{Cert: cert, Key: key, PEM: certPEM}, nil
}

func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not a PKCS#1, SEC 1 or PKCS#8 private key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return signer, nil
}

// certValidity is long enough for a dev node's life; a new `up` makes new ones.
const certValidity = 365 * 24 * time.Hour

// KubeletClientCert is the kubelet's identity to the API server: the Node
// authorizer lets system:node:<name> of group system:nodes act for that
// node only.
func (ca *CA) KubeletClientCert(node string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		x509.ExtKeyUsageClientAuth, nil, nil)
}

// ClientCert is a client certificate for user: what a component of the
// node other than the kubelet presents, with only the rights RBAC gives
// that user.
func (ca *CA) ClientCert(user string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(pkix.Name{CommonName: user}, x509.ExtKeyUsageClientAuth, nil, nil)
}

// KubeletServingCert is what the kubelet presents to the API server
// (logs, exec, port-forward) at the node's address.
func (ca *CA) KubeletServingCert(node string, ip net.IP) (certPEM, keyPEM []byte, err error) {
	return ca.issue(pkix.Name{CommonName: node}, x509.ExtKeyUsageServerAuth, []string{node}, []net.IP{ip})
}

func (ca *CA) issue(subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing a certificate for %s: %w", subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// writePair writes name.crt and name.key (0600) into dir.
func writePair(dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil { //nolint:gosec // certificates are public; keys are written 0600
		return "", "", err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
