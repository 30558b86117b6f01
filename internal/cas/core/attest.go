package core

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/cas/pki"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/secret"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Attest verifies the evidence against the service's policy and the CSR,
// then issues the certificate and hands out env, files and secrets.
func (c *CAS) Attest(req *wire.AttestRequest) (*wire.AttestResult, error) {
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

// attest returns the reason label of a rejection with it. Its phases:
// find the service, read the CSR's key, judge the evidence by the
// service's policy, issue the certificate, and seal the service's content
// to the CSR's key.
func (c *CAS) attest(req *wire.AttestRequest) (*wire.AttestResult, string, error) {
	k, reg, svc, reason, err := c.service(req)
	if err != nil {
		return nil, reason, err
	}
	csr, csrKey, binding, err := readCSR(req.CSR)
	if err != nil {
		return nil, "csr", err
	}
	claims, reason, err := c.judge(req, reg.doc.Policy(svc), binding)
	if err != nil {
		return nil, reason, err
	}
	res, err := c.issue(k, req, reg, svc, csr.PublicKey, claims)
	if err != nil {
		return nil, "error", err
	}
	content, err := c.content(k, req.Policy, svc)
	if err != nil {
		return nil, "error", err
	}
	// Sealed to the key the evidence binds: a replayed request gets a
	// certificate for a key it does not hold and nothing it can open.
	if res.Sealed, err = wire.Seal(csrKey, req.Policy, req.Service, content); err != nil {
		return nil, "csr", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return res, "", nil
}

// service finds the policy and service a request names, in a ready CAS.
func (c *CAS) service(req *wire.AttestRequest) (*keys, *registered, *policy.Service, string, error) {
	c.mu.RLock()
	k, err := c.ready()
	var reg *registered
	if err == nil {
		reg = k.policies[req.Policy]
	}
	c.mu.RUnlock()
	if err != nil {
		return nil, nil, nil, "not-ready", err
	}
	if reg == nil {
		return nil, nil, nil, "unknown-policy", fmt.Errorf("%w: policy %q", ErrNotFound, req.Policy)
	}
	svc := reg.doc.Service(req.Service)
	if svc == nil {
		return nil, nil, nil, "unknown-service", fmt.Errorf("%w: service %q in policy %q", ErrNotFound, req.Service, req.Policy)
	}
	return k, reg, svc, "", nil
}

// readCSR reads the CSR, the ECDSA key CAS seals the service's content
// to, and the report data the evidence must start with to bind that key.
func readCSR(der []byte) (*x509.CertificateRequest, *ecdsa.PublicKey, []byte, error) {
	csr, err := pki.ParseCSR(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	csrKey, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, nil, nil, fmt.Errorf("%w: csr: a %T key, but CAS seals the service's secrets to the CSR's key: use ECDSA P-256 or P-384", ErrInvalid, csr.PublicKey)
	}
	binding, err := wire.KeyBinding(csr.PublicKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: csr: %w", ErrInvalid, err)
	}
	return csr, csrKey, binding, nil
}

// judge verifies the evidence and checks its claims against the service's
// policy p, whose report data must be binding; the reason labels a
// rejection.
func (c *CAS) judge(req *wire.AttestRequest, p attest.Policy, binding []byte) (*attest.Claims, string, error) {
	opts := verify.Options{At: c.cfg.Clock.Now(), Folder: c.cfg.Collateral, Intel: c.cfg.Intel, SNP: c.cfg.SNP, TestRoots: c.cfg.TestRoots}
	if req.Evidence.Type == attest.Sim && c.cfg.AllowSimulation {
		var err error
		if c.cfg.SimKeys != nil {
			if opts.SimKeys, err = c.cfg.SimKeys.Keys(); err != nil {
				return nil, "error", fmt.Errorf("reading the pinned simulation keys: %w", err)
			}
		}
		// Unpinned, anyone's key would do: a pod could claim another's
		// policy. No key pinned means no simulated evidence at all.
		if len(opts.SimKeys) == 0 {
			err := attest.Reject(attest.CheckChain, "this CAS pins no simulation keys, so it takes no simulated evidence: give it the LAS keys (or a developer's key) to pin")
			return nil, string(attest.CheckChain), fmt.Errorf("%w: %w", ErrRejected, err)
		}
	}
	claims, err := verify.Evidence(req.Evidence, opts)
	switch {
	case err != nil:
	case claims.Insecure && !c.cfg.AllowSimulation:
		// CAS's own refusal comes first: it is the reason whatever the
		// policy says.
		err = attest.Reject(attest.CheckSimulation, "the evidence is simulated and this CAS does not accept simulation (it runs without --simulation; a CAS resource asks for it with spec.simulation)")
	default:
		p.ReportData = binding
		err = p.Check(claims)
	}
	if err != nil {
		check := attest.CheckOf(err)
		if check == "" {
			return nil, "error", err
		}
		return nil, string(check), fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if claims.TestRoot {
		c.cfg.Log.Warn("INSECURE: workload evidence that chains to a test root, not a vendor's, was taken (--insecure-test-roots)", "policy", req.Policy, "service", req.Service, "type", string(claims.Type))
	}
	return claims, "", nil
}

// issue makes the service's certificate for the CSR's key, with the claims
// in an extension and the workload's identity, and the result around it:
// the chain, the CAs, the mesh's authorization, the policy's owners.
func (c *CAS) issue(k *keys, req *wire.AttestRequest, reg *registered, svc *policy.Service, key crypto.PublicKey, claims *attest.Claims) (*wire.AttestResult, error) {
	claimsJSON, err := json.Marshal(claims)
	if err != nil {
		return nil, err
	}
	leaf, err := k.authority.Issue(pki.Request{
		PublicKey: key, CommonName: wire.CommonName(req.Policy, req.Service), SANs: svc.Certificate.SANs,
		Identity: wire.MeshID{Policy: req.Policy, Service: req.Service},
		Validity: svc.CertificateValidity(), Claims: claimsJSON, Now: c.cfg.Clock.Now(),
	})
	if err != nil {
		return nil, err
	}
	cas := k.authority.PEMs()
	res := &wire.AttestResult{Certificate: string(pki.CertPEM(leaf.Raw)) + cas.Chain, MeshCA: cas.Mesh, RootCA: cas.Root}
	res.Mesh.Allow, res.Mesh.Upstreams = svc.MeshAuthz(req.Policy)
	if len(reg.owners) > 0 {
		res.Owners, res.OwnerThreshold = slices.Clone(reg.owners), reg.doc.OwnerThreshold()
	}
	return res, nil
}

// content is what the service is given: its secrets' material, and its
// env and files rendered from them and from its workload secret.
func (c *CAS) content(k *keys, policyName string, svc *policy.Service) (wire.Content, error) {
	content := wire.Content{Secrets: map[string]map[string]string{}}
	err := k.enc.View(c.cfg.Store, func(etx store.Tx) error {
		for _, name := range svc.Secrets {
			raw, err := etx.Get(bucketSecrets, secretKey(policyName, name))
			if err != nil {
				return err
			}
			var m secret.Material
			if raw == nil || json.Unmarshal(raw, &m) != nil {
				return fmt.Errorf("secret %s of policy %s is missing from the state", name, policyName)
			}
			content.Secrets[name] = m.Fields()
		}
		return nil
	})
	if err != nil {
		return content, err
	}
	data := policy.TemplateData{Secrets: content.Secrets, CAS: policy.CASData{ServerName: k.authority.TrustDomain()}}
	if id := svc.WorkloadSecretID; id != "" {
		data.WorkloadSecret = secret.Workload(k.seed, policyName, id).Fields()
	}
	if content.Env, err = render(svc.Env, data); err == nil {
		content.Files, err = render(svc.Files, data)
	}
	return content, err
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

// CAs returns the CA certificates, PEM.
func (c *CAS) CAs() (*wire.CAs, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	k, err := c.ready()
	if err != nil {
		return nil, err
	}
	cas := k.authority.PEMs()
	return &wire.CAs{RootCA: cas.Root, MeshCA: cas.Mesh}, nil
}
