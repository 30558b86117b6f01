package v1beta1

import "github.com/cloister-cc/cloister/api/common"

// GetServiceStatus returns the status every service kind shares.
func (d *NitroEnclaveDeployment) GetServiceStatus() *common.ServiceStatus {
	return &d.Status.ServiceStatus
}

// GetServiceSpec returns the spec every service kind has.
func (d *NitroEnclaveDeployment) GetServiceSpec() *common.ServiceSpec { return &d.Spec.ServiceSpec }
