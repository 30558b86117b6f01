package core

import (
	"crypto/ecdsa"
	"fmt"
	"slices"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// hardwareOnly refuses services that only simulated evidence could meet,
// for a CAS that refuses simulated evidence: with no identities such a
// service reads as "anyone", and it could never attest here anyway.
func hardwareOnly(doc *policy.Document) error {
	for i := range doc.Services {
		svc := &doc.Services[i]
		hardware := false
		for _, id := range svc.Attestation.Identities {
			hardware = hardware || id.Type != attest.Sim
		}
		if !hardware {
			return fmt.Errorf("%w: services[%d] (%s): no hardware identity, and this CAS does not accept simulated evidence: list the measurements the service may have (a simulated-only policy belongs on a CAS with simulation)",
				ErrInvalid, i, svc.Name)
		}
	}
	return nil
}

// earlier answers a correctly signed submission of a version CAS has
// already passed: the current one again is unchanged; an older one is
// superseded; a document CAS never held at that version conflicts.
func (c *CAS) earlier(k *keys, doc *policy.Document, s *policy.Signed, current *registered,
	refuse func(error) (*wire.Registration, error)) (*wire.Registration, error) {
	digest := doc.Digest()
	recs, err := c.history(k, doc.Name, s.Version, s.Version)
	if err != nil {
		return nil, err
	}
	rec := recs[0]
	if rec.Digest != digest || rec.Predecessor != s.Predecessor {
		return refuse(fmt.Errorf("%w: CAS's version %d of policy %s is another document (%s after %q): sign this one as version %d%s",
			ErrConflict, s.Version, doc.Name, rec.Digest, rec.Predecessor, current.Version+1, after(current)))
	}
	if s.Version < current.Version {
		return refuse(fmt.Errorf("%w: policy %s version %d was replaced by version %d (%s); to return to it, its owners sign it again as version %d%s",
			ErrSuperseded, doc.Name, s.Version, current.Version, current.Digest, current.Version+1, after(current)))
	}
	return &wire.Registration{Name: doc.Name, Version: current.Version, Digest: digest, Predecessor: current.Predecessor, Unchanged: true}, nil
}

// authorize checks the signatures against the owners entitled to approve
// s.Version: the document's own for version 1, those of version N-1 for
// version N.
//
// It returns the keys (fingerprints) whose signatures verified. A version
// whose certificates name a wildcard may carry a board key's signature
// too, whatever its number: the board allows the wildcard.
func (c *CAS) authorize(k *keys, doc *policy.Document, s *policy.Signed, current *registered) (map[string]bool, error) {
	owners, what := doc, "its owners"
	switch {
	case s.Version == 1 && doc.Immutable():
		// Nobody owns it: the board's approval of the name is the only
		// signature it can carry, and the one it needs.
		approvers, parent := c.nameApprovers(k, doc)
		signers, err := policy.Signers(doc, s.Link, s.Signatures, approvers)
		if err != nil {
			return nil, fmt.Errorf("%w: policy %s has no owners, so only those who approve its name sign it: %w", ErrUnauthorized, doc.Name, err)
		}
		if approvers == nil && len(s.Signatures) > 0 {
			return nil, fmt.Errorf("%w: policy %s has no owners, so nobody can sign it: remove the signatures", ErrUnauthorized, doc.Name)
		}
		return signers, approveNew(k.board, parent, doc, signers)
	case s.Version == 1:
	case s.Version == current.Version+1:
		owners = current.doc
	case s.Version > 1:
		prev, err := c.document(k, doc.Name, s.Version-1)
		if err != nil {
			return nil, err
		}
		owners = prev
	}
	if s.Version > 1 {
		what = fmt.Sprintf("the owners of version %d", s.Version-1)
		if owners.Immutable() {
			return nil, fmt.Errorf("%w: policy %s has no owners, so version %d cannot be changed; register the new version under another name",
				ErrUnauthorized, doc.Name, s.Version-1)
		}
	}
	keys, err := owners.OwnerKeys()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	approvers, parent := keys, (*policy.Document)(nil)
	if s.Version == 1 {
		// A new name: the board, or its namespace's owners, sign it
		// besides its owners.
		var more []*ecdsa.PublicKey
		more, parent = c.nameApprovers(k, doc)
		approvers = append(slices.Clip(keys), more...)
	} else if doc.HasWildcard() {
		approvers = append(slices.Clip(keys), k.board.keys...)
	}
	signers, err := policy.Signers(doc, s.Link, s.Signatures, approvers)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	byOwners := countSigned(keys, signers)
	if need := owners.OwnerThreshold(); byOwners < need {
		return nil, fmt.Errorf("%w: policy %s version %d is signed by %d of %s, %d needed: collect more signatures (cloister policy sign on the SignedPolicy)",
			ErrUnauthorized, doc.Name, s.Version, byOwners, what, need)
	}
	if s.Version == 1 {
		return signers, approveNew(k.board, parent, doc, signers)
	}
	return signers, nil
}

// document reads version v of a policy from its history.
func (c *CAS) document(k *keys, name string, v int) (*policy.Document, error) {
	recs, err := c.history(k, name, v, v)
	if err != nil {
		return nil, err
	}
	d, err := policy.ParseOwners([]byte(recs[0].Policy))
	if err != nil {
		return nil, fmt.Errorf("policy %s version %d in the history: %w", name, v, err)
	}
	return d, nil
}

// describe is what CAS holds of a policy, for errors.
func describe(r *registered) string {
	if r == nil {
		return "no version of it"
	}
	return fmt.Sprintf("version %d (%s)", r.Version, r.Digest)
}

// after is the predecessor a next version must name, for errors.
func after(r *registered) string {
	if r == nil {
		return ""
	}
	return " after " + r.Digest + " (cloister policy sign --cas URL asks CAS)"
}
