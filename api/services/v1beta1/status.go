package v1beta1

import "github.com/cloister-cc/cloister/api/common"

// GetServiceStatus returns the status every service kind has, for the
// shared reconciler.
func (s *CAS) GetServiceStatus() *common.ServiceStatus { return &s.Status.ServiceStatus }

// GetServiceSpec returns the spec every service kind has.
func (s *CAS) GetServiceSpec() *common.ServiceSpec { return &s.Spec.ServiceSpec }

// GetServiceStatus returns the status every service kind has.
func (s *Vault) GetServiceStatus() *common.ServiceStatus { return &s.Status.ServiceStatus }

// GetServiceSpec returns the spec every service kind has.
func (s *Vault) GetServiceSpec() *common.ServiceSpec { return &s.Spec.ServiceSpec }
