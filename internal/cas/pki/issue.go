package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/cloister-cc/cloister/internal/base/x509sign"
	"github.com/cloister-cc/cloister/internal/cas/seed"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Marshal is the CA certificates as PEM (root, intermediate, mesh), as
// CAS keeps them.
func (a *Authority) Marshal() []byte {
	var b bytes.Buffer
	for _, c := range []*x509.Certificate{a.Root.Cert, a.Intermediate.Cert, a.Mesh.Cert} {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// Load pairs stored CA certificates with the keys derived from s; a
// mismatch means the state is not this seed's.
func Load(s seed.Seed, certsPEM []byte) (*Authority, error) {
	var certs []*x509.Certificate
	for rest := certsPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("stored CA certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) != 3 {
		return nil, fmt.Errorf("stored CA certificates: %d, want root, intermediate and mesh", len(certs))
	}
	a := &Authority{
		Root:         CA{certs[0], DeriveKey(s, "root")},
		Intermediate: CA{certs[1], DeriveKey(s, "intermediate")},
		Mesh:         CA{certs[2], DeriveKey(s, "mesh")},
	}
	for _, ca := range []CA{a.Root, a.Intermediate, a.Mesh} {
		if !ca.Key.PublicKey.Equal(ca.Cert.PublicKey) {
			return nil, fmt.Errorf("the key derived for %q does not match its certificate: the state is another seed's", ca.Cert.Subject.CommonName)
		}
	}
	return a.withPEMs(), nil
}

// Request is what a workload certificate is made from.
type Request struct {
	// PublicKey is the certified key (a checked CSR's, see ParseCSR).
	PublicKey crypto.PublicKey
	// CommonName and SANs come from the policy, not the CSR.
	CommonName string
	SANs       []string
	// Identity is the workload's mesh identity (a URI SAN); its trust
	// domain is the authority's.
	Identity wire.MeshID
	Validity time.Duration
	// Claims (JSON) go into the ClaimsOID extension.
	Claims []byte
	Now    time.Time
}

// ParseCSR reads a PEM or DER CSR and checks its self-signature and key.
func ParseCSR(data []byte) (*x509.CertificateRequest, error) {
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != "CERTIFICATE REQUEST" {
			return nil, fmt.Errorf("csr: a PEM %q block, want CERTIFICATE REQUEST", block.Type)
		}
		data = block.Bytes
	}
	csr, err := x509.ParseCertificateRequest(data)
	if err != nil {
		return nil, fmt.Errorf("csr: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("csr: its signature does not verify: %w", err)
	}
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return nil, errors.New("csr: ECDSA keys must be P-256 or P-384")
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("csr: an RSA key of %d bits, want 2048 or more", k.N.BitLen())
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Errorf("csr: a %T key: use ECDSA P-256/P-384, RSA or Ed25519", k)
	}
	return csr, nil
}

// Issue makes a workload certificate signed by the mesh CA.
func (a *Authority) Issue(r Request) (*x509.Certificate, error) {
	claims, err := asn1.Marshal(r.Claims)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:    serial(),
		Subject:         pkix.Name{CommonName: r.CommonName, Organization: []string{"Cloister CAS"}},
		NotBefore:       r.Now.Add(-time.Minute),
		NotAfter:        earlier(r.Now.Add(r.Validity), a.Mesh.Cert.NotAfter),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		ExtraExtensions: []pkix.Extension{{Id: ClaimsOID, Value: claims}},
	}
	if _, ok := r.PublicKey.(*rsa.PublicKey); ok {
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	for _, san := range r.SANs {
		if ip := net.ParseIP(san); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, san)
		}
	}
	if r.Identity != (wire.MeshID{}) {
		id := r.Identity
		id.TrustDomain = a.TrustDomain()
		tmpl.URIs = []*url.URL{id.URI()}
	}
	der, err := x509sign.Certificate(tmpl, a.Mesh.Cert, r.PublicKey, a.Mesh.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", r.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

// Claims reads the attested claims (JSON) of a workload certificate.
func Claims(c *x509.Certificate) ([]byte, bool) {
	for _, e := range c.Extensions {
		if e.Id.Equal(ClaimsOID) {
			var b []byte
			if _, err := asn1.Unmarshal(e.Value, &b); err == nil {
				return b, true
			}
		}
	}
	return nil, false
}
