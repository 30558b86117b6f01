// Package proxy is the service mesh proxy of confidential pods
// (cloister-mesh): the ingress terminates TLS for the app's ports with the
// workload certificate the initializer wrote (requiring a client
// certificate from the mesh CA unless a port says otherwise, and a caller
// whose mesh identity the service's policy admits), the egress listens on
// loopback addresses for the app and opens mTLS to upstreams, verifying
// them against the mesh CA, by name and by the mesh identity the policy
// lists. Certificates are read again when the initializer's files change.
package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Certs are the workload's certificate and key and the mesh CA in the
// initializer's folder. Every handshake first checks (a stat per file)
// whether they changed, so a rotation applies to the next connection and
// no connection is dropped for it; a half-written set keeps the last good
// one.
type Certs struct {
	Dir string

	mu     sync.Mutex
	stamp  []fileStamp
	loaded *loaded
}

type loaded struct {
	cert tls.Certificate
	ca   *x509.CertPool
	// self is the workload's mesh identity; authz who it admits and
	// connects to (of self's trust domain).
	self  wire.MeshID
	authz wire.MeshAuthz
}

// admits refuses a caller whose certificate names no workload of this
// CAS, or one the service does not allow.
func (l *loaded) admits(peer *x509.Certificate) error {
	id, err := l.sameCAS(peer)
	if err != nil {
		return err
	}
	if !wire.Admits(l.authz.Allow, id) {
		return fmt.Errorf("caller %s is not among the callers %s admits (%s)", id, l.self, strings.Join(l.authz.Allow, ", "))
	}
	return nil
}

// upstream refuses an upstream that is no workload of this CAS, or not
// one the service connects to.
func (l *loaded) upstream(peer *x509.Certificate) error {
	id, err := l.sameCAS(peer)
	if err != nil {
		return err
	}
	if !wire.Admits(l.authz.Upstreams, id) {
		return fmt.Errorf("upstream %s is not among the workloads %s connects to (%s)", id, l.self, strings.Join(l.authz.Upstreams, ", "))
	}
	return nil
}

// sameCAS is the peer's identity when a workload of this CAS.
func (l *loaded) sameCAS(peer *x509.Certificate) (wire.MeshID, error) {
	id, err := wire.CertMeshID(peer)
	if err != nil {
		return wire.MeshID{}, err
	}
	if id.TrustDomain != l.self.TrustDomain {
		return wire.MeshID{}, fmt.Errorf("peer %s is a workload of another CAS than %s", id, l.self.TrustDomain)
	}
	return id, nil
}

type fileStamp struct {
	size int64
	mod  time.Time
}

func (c *Certs) files() []string {
	return []string{filepath.Join(c.Dir, casclient.CertChainFile), filepath.Join(c.Dir, casclient.KeyFile), filepath.Join(c.Dir, casclient.MeshCAFile),
		filepath.Join(c.Dir, casclient.MeshFile)}
}

// current returns the certificates, read again if a file changed.
func (c *Certs) current() (*loaded, error) {
	files := c.files()
	stamp := make([]fileStamp, len(files))
	for i, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			return c.keep(fmt.Errorf("reading the mesh certificates: %w", err))
		}
		stamp[i] = fileStamp{info.Size(), info.ModTime()}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded != nil && equalStamps(stamp, c.stamp) {
		return c.loaded, nil
	}
	l, err := load(files)
	if err != nil {
		if c.loaded != nil {
			return c.loaded, nil // a rotation half written: the last good set
		}
		return nil, err
	}
	c.loaded, c.stamp = l, stamp
	return l, nil
}

// Ready says whether a certificate set loads.
func (c *Certs) Ready() error {
	_, err := c.current()
	return err
}

// keep returns the last good set when a file is briefly missing.
func (c *Certs) keep(err error) (*loaded, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded != nil {
		return c.loaded, nil
	}
	return nil, err
}

func equalStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].size != b[i].size || !a[i].mod.Equal(b[i].mod) {
			return false
		}
	}
	return true
}

func load(files []string) (*loaded, error) {
	chain, err := os.ReadFile(files[0])
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(files[1])
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(files[2])
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return nil, fmt.Errorf("the workload certificate and key: %w", err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(bytes.TrimSpace(caPEM)) {
		return nil, errors.New("the mesh CA file holds no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, err
	}
	self, err := wire.CertMeshID(leaf)
	if err != nil {
		return nil, fmt.Errorf("the workload certificate: %w", err)
	}
	l := &loaded{cert: cert, ca: ca, self: self}
	raw, err := os.ReadFile(files[3])
	if err != nil {
		return nil, err
	}
	if err := strictjson.Unmarshal(raw, &l.authz); err != nil {
		return nil, fmt.Errorf("%s: %w", casclient.MeshFile, err)
	}
	return l, nil
}

// ServerConfig is the TLS configuration of an ingress port: TLS 1.3, the
// current workload certificate, and with clientAuth a client certificate
// of the mesh CA required.
func (c *Certs) ServerConfig(clientAuth bool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l, err := c.current()
			if err != nil {
				return nil, err
			}
			cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{l.cert}}
			if clientAuth {
				cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, l.ca
				// The mesh CA vouches for a workload; the policy says which
				// workloads may call this one.
				cfg.VerifyConnection = func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 {
						return errors.New("no client certificate")
					}
					return l.admits(cs.PeerCertificates[0])
				}
			}
			return cfg, nil
		},
	}
}

// ClientConfig is the TLS configuration of an egress connection to
// serverName: the current workload certificate as the client's, the
// upstream verified against the mesh CA.
func (c *Certs) ClientConfig(serverName string) (*tls.Config, error) {
	l, err := c.current()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13, ServerName: serverName, RootCAs: l.ca,
		Certificates: []tls.Certificate{l.cert},
		// Its name, and that it is a workload of this CAS.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no server certificate")
			}
			return l.upstream(cs.PeerCertificates[0])
		},
	}, nil
}
