// Package sgxplugin is the SGXPlugin controller: the shared service
// reconciler with the SGX device plugin chart, and the device metrics and
// alerts of seed 000 computed from nodes and pods.
package sgxplugin

import (
	"context"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/controller/service"
	"github.com/cloister-cc/cloister/internal/health"
	"github.com/cloister-cc/cloister/internal/metrics"
)

// Kind adapts SGXPlugin to the service reconciler.
type Kind struct {
	service.Base
}

var _ service.Kind = (*Kind)(nil)

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

// Observe computes the device metrics and alerts.
func (k *Kind) Observe(ctx context.Context, obj service.Object, oos []service.OwnedObject) health.Observation {
	p := as(obj)
	nodes, pods, err := k.NodesAndPods(ctx, p.Spec.NodeSelector)
	if err != nil {
		return k.unknown(p, err.Error())
	}
	st, healthy := Devices(nodes, pods, service.LiveDaemonSet(oos))
	st.ServiceStatus = p.Status.ServiceStatus
	p.Status = st
	return healthy
}

func (k *Kind) unknown(p *basev1beta1.SGXPlugin, msg string) health.Observation {
	s := &p.Status
	s.AvailableSGXDevices, s.CapacitySGXDevices, s.UsedSGXDevices = -1, -1, -1
	s.DesiredReplicas, s.ReadyReplicas, s.SGXDeviceAlert, s.SGXReplicaAlert = -1, -1, -1, -1
	return health.Obs(health.Unknown, "ReadError", msg)
}

// Metrics exports every metric and alert field.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	s := as(obj).Status
	return service.DeviceSamples([]metrics.Sample{
		{Field: "availableSGXDevices", Value: float64(s.AvailableSGXDevices)},
		{Field: "capacitySGXDevices", Value: float64(s.CapacitySGXDevices)},
		{Field: "usedSGXDevices", Value: float64(s.UsedSGXDevices)},
		{Field: "desiredReplicas", Value: float64(s.DesiredReplicas)},
		{Field: "readyReplicas", Value: float64(s.ReadyReplicas)},
		{Field: "sgxDeviceAlert", Value: float64(s.SGXDeviceAlert)},
		{Field: "sgxReplicaAlert", Value: float64(s.SGXReplicaAlert)},
	}, map[string]map[string]int32{
		"availableSGXDevices": s.AvailableSGXDevicesPerNode,
		"capacitySGXDevices":  s.CapacitySGXDevicesPerNode,
		"usedSGXDevices":      s.UsedSGXDevicesPerNode,
	})
}
