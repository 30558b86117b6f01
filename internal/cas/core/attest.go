package core

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/store"
)

// AttestRequest is a workload asking for what its policy gives it.
type AttestRequest struct {
	Policy   string          `json:"policy"`
	Service  string          `json:"service"`
	Evidence attest.Evidence `json:"evidence"`
	// CSR (PEM or DER) for the workload's key; the evidence's report data
	// must start with the SHA-256 of that key (PKIX DER).
	CSR []byte `json:"csr"`
}

// AttestResult is what an attested workload gets.
type AttestResult struct {
	// Certificate is the workload's chain (PEM): its certificate, the mesh
	// CA, the intermediate.
	Certificate string            `json:"certificate"`
	MeshCA      string            `json:"meshCA"`
	RootCA      string            `json:"rootCA"`
	Env         map[string]string `json:"env,omitempty"`
	Files       map[string]string `json:"files,omitempty"`
	// Secrets the service may read, by name, then field (Raw, Hex,
	// Base64; Cert, Key, Chain).
	Secrets map[string]map[string]string `json:"secrets,omitempty"`
}

// KeyBinding is the report data that binds a key (a CSR's, or CAS's own
// TLS key): SHA-256 of its PKIX DER, the first 32 bytes of the evidence's
// report data.
func KeyBinding(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(der)
	return h[:], nil
}

// Attest verifies the evidence against the service's policy and the CSR,
// then issues the certificate and hands out env, files and secrets.
func (c *CAS) Attest(req *AttestRequest) (*AttestResult, error) {
	start := time.Now()
	res, reason, err := c.attest(req)
	result := "accepted"
	if err != nil {
		result = "rejected"
	}
	c.cfg.Metrics.attestations.WithLabelValues(result, reason).Inc()
	c.cfg.Metrics.attestSeconds.Observe(time.Since(start).Seconds())
	attrs := []any{"policy", req.Policy, "service", req.Service, "evidence", string(req.Evidence.Type), "result", result}
	if err != nil {
		c.cfg.Log.Warn("audit: attestation", append(attrs, "reason", err.Error())...)
	} else {
		c.cfg.Log.Info("audit: attestation", attrs...)
	}
	return res, err
}

// attest returns the reason label of a rejection with it.
func (c *CAS) attest(req *AttestRequest) (*AttestResult, string, error) {
	c.mu.RLock()
	k, err := c.ready()
	var reg *registered
	if err == nil {
		reg = k.policies[req.Policy]
	}
	c.mu.RUnlock()
	if err != nil {
		return nil, "not-ready", err
	}
	if reg == nil {
		return nil, "unknown-policy", fmt.Errorf("%w: policy %q", ErrNotFound, req.Policy)
	}
	svc := reg.doc.Service(req.Service)
	if svc == nil {
		return nil, "unknown-service", fmt.Errorf("%w: service %q in policy %q", ErrNotFound, req.Service, req.Policy)
	}
	csr, err := pki.ParseCSR(req.CSR)
	if err != nil {
		return nil, "csr", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	binding, err := KeyBinding(csr.PublicKey)
	if err != nil {
		return nil, "csr", fmt.Errorf("%w: csr: %v", ErrInvalid, err)
	}
	claims, err := verify.Evidence(req.Evidence, verify.Options{At: c.cfg.Clock.Now(), CollateralDir: c.cfg.CollateralDir})
	if err == nil {
		p := reg.doc.Policy(svc)
		p.ReportData = binding
		err = p.Check(claims)
		if err == nil && claims.Insecure && !c.cfg.AllowSimulation {
			err = attest.Reject(attest.CheckSimulation, "the evidence is simulated and this CAS does not accept simulation (it runs without --simulation; a CAS resource asks for it with spec.simulation)")
		}
	}
	if err != nil {
		check := attest.CheckOf(err)
		if check == "" {
			return nil, "error", err
		}
		return nil, string(check), fmt.Errorf("%w: %w", ErrRejected, err)
	}
	claimsJSON, err := json.Marshal(claims)
	if err != nil {
		return nil, "error", err
	}
	leaf, err := k.authority.Issue(pki.Request{
		PublicKey: csr.PublicKey, CommonName: req.Service + "." + req.Policy, SANs: svc.Certificate.SANs,
		Validity: svc.CertificateValidity(), Claims: claimsJSON, Now: c.cfg.Clock.Now(),
	})
	if err != nil {
		return nil, "error", err
	}
	a := k.authority
	res := &AttestResult{
		Certificate: string(pemCert(leaf.Raw)) + string(pemCert(a.Mesh.Cert.Raw)) + string(pemCert(a.Intermediate.Cert.Raw)),
		MeshCA:      string(pemCert(a.Mesh.Cert.Raw)),
		RootCA:      string(pemCert(a.Root.Cert.Raw)),
		Secrets:     map[string]map[string]string{},
	}
	err = c.cfg.Store.View(func(tx store.Tx) error {
		for _, name := range svc.Secrets {
			raw, err := k.enc.Tx(tx).Get(bucketSecrets, secretKey(req.Policy, name))
			if err != nil {
				return err
			}
			var m material
			if raw == nil || json.Unmarshal(raw, &m) != nil {
				return fmt.Errorf("secret %s of policy %s is missing from the state", name, req.Policy)
			}
			res.Secrets[name] = m.fields()
		}
		return nil
	})
	if err != nil {
		return nil, "error", err
	}
	data := policy.TemplateData{Secrets: res.Secrets}
	if res.Env, err = render(svc.Env, data); err == nil {
		res.Files, err = render(svc.Files, data)
	}
	if err != nil {
		return nil, "error", err
	}
	return res, "", nil
}

func render(templates map[string]string, data policy.TemplateData) (map[string]string, error) {
	if len(templates) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(templates))
	for name, t := range templates {
		v, err := policy.Render(name, t, data)
		if err != nil {
			return nil, errors.New("rendering " + name + ": " + err.Error())
		}
		out[name] = v
	}
	return out, nil
}

// CAs are the certificates workloads and their users trust: the root
// (pinned by data owners) and the mesh CA (which issues workload
// certificates).
type CAs struct {
	RootCA string `json:"rootCA"`
	MeshCA string `json:"meshCA"`
}

// CAs returns the CA certificates, PEM.
func (c *CAS) CAs() (*CAs, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return nil, err
	}
	return &CAs{RootCA: string(pemCert(k.authority.Root.Cert.Raw)), MeshCA: string(pemCert(k.authority.Mesh.Cert.Raw))}, nil
}
