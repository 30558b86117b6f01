package pki

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"time"
)

// ServerValidity is how long CAS's own server certificate lasts; a
// replica issues itself another well before it ends.
const ServerValidity = 30 * 24 * time.Hour

// IssueServer makes CAS's own server certificate for key: the name its
// workloads reach it by (TrustDomain, which no workload certificate may
// carry), signed by the intermediate CA, so a workload that trusts CAS's
// root CA (every replica's, recovered or not) trusts any replica of this
// CAS and nothing else under that name.
func (a *Authority) IssueServer(key crypto.PublicKey, now time.Time) (*x509.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: a.TrustDomain(), Organization: []string{"Cloister CAS"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     earlier(now.Add(ServerValidity), a.Intermediate.Cert.NotAfter),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{a.TrustDomain()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Intermediate.Cert, key, a.Intermediate.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing CAS's server certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}
