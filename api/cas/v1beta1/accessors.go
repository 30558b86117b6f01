package v1beta1

import "github.com/cloister-cc/cloister/api/common"

// GetPolicyStatus returns the status both policy kinds share, for the
// policy controller.
func (p *SignedPolicy) GetPolicyStatus() *PolicyStatus { return &p.Status }

// GetCASAddress is the CAS the policy is registered with.
func (p *SignedPolicy) GetCASAddress() string { return p.Spec.CASAddress }

// GetPolicyStatus returns the status both policy kinds share.
func (p *EncryptedPolicy) GetPolicyStatus() *PolicyStatus { return &p.Status }

// GetCASAddress is the CAS the policy is registered with.
func (p *EncryptedPolicy) GetCASAddress() string { return p.Spec.CASAddress }

// GetServiceStatus returns the state and conditions every Cloister
// resource reports.
func (p *SignedPolicy) GetServiceStatus() *common.ServiceStatus { return &p.Status.ServiceStatus }

// GetServiceStatus returns the state and conditions every Cloister
// resource reports.
func (p *EncryptedPolicy) GetServiceStatus() *common.ServiceStatus { return &p.Status.ServiceStatus }
