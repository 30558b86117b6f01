// Package sgxplugin is the SGXPlugin controller: the shared service
// reconciler with the SGX device plugin chart, and the device metrics and
// alerts (sgxDeviceAlert, sgxReplicaAlert) computed by the shared device
// accounting from nodes and pods, and each SGX node's EPC (capacity and
// use, in bytes).
package sgxplugin

import (
	"cmp"
	"context"

	corev1 "k8s.io/api/core/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Kind adapts SGXPlugin to the service reconciler: the shared device-plugin
// kind, and its release.
type Kind struct {
	devices.Kind[*basev1beta1.SGXPlugin]
}

// New is the SGXPlugin kind over b.
func New(b service.Base) *Kind {
	return &Kind{devices.Kind[*basev1beta1.SGXPlugin]{Base: b, Of: of, Extra: func(p *basev1beta1.SGXPlugin, nodes []corev1.Node, pods []corev1.Pod) {
		if _, dra := p.Spec.Mode.Runs(); dra && nodes != nil {
			// The EPC is the enclave device's capacity, in use what the
			// claims of it consumed.
			slices, claims, err := devices.SlicesAndClaims(context.Background(), b.Reader)
			if err != nil {
				p.Status.CapacityEPCBytesPerNode, p.Status.UsedEPCBytesPerNode = nil, nil
				return
			}
			p.Status.CapacityEPCBytesPerNode, p.Status.UsedEPCBytesPerNode = epcDRA(nodes, slices, claims)
			return
		}
		p.Status.CapacityEPCBytesPerNode, p.Status.UsedEPCBytesPerNode = epc(nodes, pods)
	}}}
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
	values["mode"] = string(cmp.Or(p.Spec.Mode, common.DeviceModeDevicePlugin))
	if p.Spec.CapacitySGXPods != nil {
		values["capacitySGXPods"] = int64(*p.Spec.CapacitySGXPods)
	}
	return ns, values, nil
}

// of is the CR's selector, its device spec and its status fields.
func of(p *basev1beta1.SGXPlugin) (common.NodeSelector, devices.Spec, devices.Fields) {
	return p.Spec.NodeSelector, spec.WithMode(p.Spec.Mode, tee.SGXDRADriver), fields(&p.Status)
}

// Metrics exports every metric and alert field, and the EPC per node.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	st := &as(obj).Status
	out := fields(st).Samples()
	for _, m := range []struct {
		name  string
		nodes map[string]int64
	}{{"capacityEPCBytes", st.CapacityEPCBytesPerNode}, {"usedEPCBytes", st.UsedEPCBytesPerNode}} {
		for node, v := range m.nodes {
			out = append(out, metrics.Sample{Field: m.name, Node: node, Value: float64(v)})
		}
	}
	return out
}
