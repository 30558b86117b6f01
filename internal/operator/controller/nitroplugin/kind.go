// Package nitroplugin is the NitroPlugin controller: the shared service
// reconciler with the Nitro Enclaves device plugin chart, the device
// metrics and alerts (nitroDeviceAlert, nitroReplicaAlert) of the shared
// device accounting, and the nodes where AWS's own plugin runs, which this
// one stays off.
package nitroplugin

import (
	"cmp"
	"context"
	"time"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Kind adapts NitroPlugin to the service reconciler: the shared device-plugin
// kind, and its release.
type Kind struct {
	devices.Kind[*basev1beta1.NitroPlugin]
}

// New is the NitroPlugin kind over b.
func New(b service.Base) *Kind {
	return &Kind{devices.Kind[*basev1beta1.NitroPlugin]{Base: b, Of: of}}
}

var (
	_ service.Kind   = (*Kind)(nil)
	_ devices.Plugin = (*Kind)(nil)
	_ service.Poller = (*Kind)(nil)
)

// PollAfter looks again a while later: the nodes to stay off come from
// the status a pass wrote, and the release takes them at the next pass,
// which no watch may bring soon (AWS's plugin leaving a node changes no
// pod that requests enclaves).
func (k *Kind) PollAfter(service.Object) time.Duration { return 30 * time.Second }

func (k *Kind) Name() string                         { return "NitroPlugin" }
func (k *Kind) ReleasePrefix() string                { return "nitro" }
func (k *Kind) New() service.Object                  { return &basev1beta1.NitroPlugin{} }
func as(obj service.Object) *basev1beta1.NitroPlugin { return obj.(*basev1beta1.NitroPlugin) }

// Release places the plugin in spec.namespace (default: the operator's)
// with the enclaves per node, the enclave CPUs, and the nodes to stay off:
// those where AWS's plugin runs, as the last status found them.
func (k *Kind) Release(obj service.Object, operatorNamespace string) (string, map[string]any, error) {
	p := as(obj)
	ns, values, err := service.NamespacedValues(&p.Spec.ServiceSpec, p.Spec.Namespace, operatorNamespace, k.DefaultImage)
	if err != nil {
		return "", nil, err
	}
	values["mode"] = string(cmp.Or(p.Spec.Mode, common.DeviceModeDevicePlugin))
	if p.Spec.Enclaves > 0 {
		values["enclaves"] = int64(p.Spec.Enclaves)
	}
	values["enclaveCPUs"] = p.Spec.EnclaveCPUs
	exclude := make([]any, 0, len(p.Status.AWSPluginNodes))
	for _, n := range p.Status.AWSPluginNodes {
		exclude = append(exclude, n)
	}
	values["excludeNodes"] = exclude
	return ns, values, nil
}

// of is the CR's selector, its device spec and its status fields.
func of(p *basev1beta1.NitroPlugin) (common.NodeSelector, devices.Spec, devices.Fields) {
	return p.Spec.NodeSelector, specOf(p.Status.AWSPluginNodes).WithMode(p.Spec.Mode, tee.NitroDRADriver), fields(&p.Status)
}

// FillStatus finds AWS's plugin on the selected nodes, then computes the
// device metrics and alerts of the others; AWS's plugin on a node makes the
// CR unhealthy, naming the nodes, until one of the two plugins leaves.
func (k *Kind) FillStatus(ctx context.Context, obj service.Object, oos []service.Owned) health.Observation {
	p := as(obj)
	nodes, pods, err := devices.NodesAndPods(ctx, k.Reader, p.Spec.NodeSelector)
	if err != nil {
		fields(&p.Status).Unknown()
		p.Status.CapacityCPUs = -1
		return health.Obs(health.Unknown, health.ReasonReadError, err.Error())
	}
	st, obs := Devices(nodes, pods, service.LiveDaemonSet(oos))
	st.ServiceStatus = p.Status.ServiceStatus
	p.Status = st
	return obs
}

// Metrics exports every metric and alert field.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	st := &as(obj).Status
	return append(fields(st).Samples(), metrics.Sample{Field: "capacityCPUs", Value: float64(st.CapacityCPUs)})
}
