// Package sgxplugin is the SGXPlugin controller: the shared service
// reconciler with the SGX device plugin chart, and the device metrics and
// alerts (sgxDeviceAlert, sgxReplicaAlert) computed by the shared device
// accounting from nodes and pods.
package sgxplugin

import (
	"context"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Kind adapts SGXPlugin to the service reconciler.
type Kind struct {
	service.Base
}

var (
	_ service.Kind   = (*Kind)(nil)
	_ devices.Plugin = (*Kind)(nil)
)

func (k *Kind) Name() string                       { return "SGXPlugin" }
func (k *Kind) ReleasePrefix() string              { return "sgx" }
func (k *Kind) New() service.Object                { return &basev1beta1.SGXPlugin{} }
func as(obj service.Object) *basev1beta1.SGXPlugin { return obj.(*basev1beta1.SGXPlugin) }

// Release places the plugin in spec.namespace (default: the operator's).
func (k *Kind) Release(obj service.Object, operatorNamespace string) (string, map[string]any, error) {
	p := as(obj)
	ns, values, err := service.NamespacedValues(&p.Spec.ServiceSpec, p.Spec.Namespace, operatorNamespace, k.DefaultImage)
	if err != nil {
		return "", nil, err
	}
	if p.Spec.CapacitySGXPods != nil {
		values["capacitySGXPods"] = int64(*p.Spec.CapacitySGXPods)
	}
	return ns, values, nil
}

// Devices: the CR's selector, the SGX spec and SGXPlugin's status fields.
func (k *Kind) Devices(obj service.Object) (common.NodeSelector, devices.Spec, devices.Fields) {
	p := as(obj)
	return p.Spec.NodeSelector, spec, fields(&p.Status)
}

// FillStatus computes the device metrics and alerts.
func (k *Kind) FillStatus(ctx context.Context, obj service.Object, oos []service.Owned) health.Observation {
	return devices.FillStatus(ctx, k.Reader, k, obj, oos)
}

// Metrics exports every metric and alert field.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	return fields(&as(obj).Status).Samples()
}
