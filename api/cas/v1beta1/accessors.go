package v1beta1

// GetPolicyStatus returns the status both policy kinds share, for the
// policy controller.
func (p *SignedPolicy) GetPolicyStatus() *PolicyStatus { return &p.Status }

// GetCASAddress is the CAS the policy is registered with.
func (p *SignedPolicy) GetCASAddress() string { return p.Spec.CASAddress }

// GetPolicyStatus returns the status both policy kinds share.
func (p *EncryptedPolicy) GetPolicyStatus() *PolicyStatus { return &p.Status }

// GetCASAddress is the CAS the policy is registered with.
func (p *EncryptedPolicy) GetCASAddress() string { return p.Spec.CASAddress }
