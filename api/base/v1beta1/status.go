package v1beta1

import "github.com/cloister-cc/cloister/api/common"

// GetServiceStatus returns the status every service kind has, for the
// shared reconciler.
func (s *SGXPlugin) GetServiceStatus() *common.ServiceStatus { return &s.Status.ServiceStatus }

// GetServiceStatus returns the status every service kind has.
func (s *LAS) GetServiceStatus() *common.ServiceStatus { return &s.Status.ServiceStatus }

// GetServiceStatus returns the status every service kind has.
func (s *CEXPlugin) GetServiceStatus() *common.ServiceStatus { return &s.Status.ServiceStatus }

// GetServiceStatus returns the status every service kind has.
func (s *ConfidentialRuntime) GetServiceStatus() *common.ServiceStatus {
	return &s.Status.ServiceStatus
}

// GetServiceStatus returns the status every service kind has.
func (s *NitroPlugin) GetServiceStatus() *common.ServiceStatus { return &s.Status.ServiceStatus }

// GetServiceSpec returns the spec every service kind has.
func (s *SGXPlugin) GetServiceSpec() *common.ServiceSpec { return &s.Spec.ServiceSpec }

// GetServiceSpec returns the spec every service kind has.
func (s *LAS) GetServiceSpec() *common.ServiceSpec { return &s.Spec.ServiceSpec }

// GetServiceSpec returns the spec every service kind has.
func (s *CEXPlugin) GetServiceSpec() *common.ServiceSpec { return &s.Spec.ServiceSpec }

// GetServiceSpec returns the spec every service kind has.
func (s *NitroPlugin) GetServiceSpec() *common.ServiceSpec { return &s.Spec.ServiceSpec }

// GetServiceSpec returns the spec every service kind has.
func (s *ConfidentialRuntime) GetServiceSpec() *common.ServiceSpec { return &s.Spec.ServiceSpec }
