// Package cexplugin is the CEXPlugin controller: the shared service
// reconciler with the CryptoExpress device plugin chart, and the device
// metrics and alerts (cexDeviceAlert, cexReplicaAlert) computed by the
// shared device accounting from s390x nodes and pods.
package cexplugin

import (
	"cmp"
	"encoding/json"
	"fmt"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/deviceplugin/cex"
	"github.com/cloister-cc/cloister/internal/operator/controller/devices"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// Kind adapts CEXPlugin to the service reconciler: the shared device-plugin
// kind, and its release.
type Kind struct {
	devices.Kind[*basev1beta1.CEXPlugin]
}

// New is the CEXPlugin kind over b.
func New(b service.Base) *Kind {
	return &Kind{devices.Kind[*basev1beta1.CEXPlugin]{Base: b, Of: of}}
}

var (
	_ service.Kind   = (*Kind)(nil)
	_ devices.Plugin = (*Kind)(nil)
)

func (k *Kind) Name() string                       { return "CEXPlugin" }
func (k *Kind) ReleasePrefix() string              { return "cex" }
func (k *Kind) New() service.Object                { return &basev1beta1.CEXPlugin{} }
func as(obj service.Object) *basev1beta1.CEXPlugin { return obj.(*basev1beta1.CEXPlugin) }

func cexType(p *basev1beta1.CEXPlugin) basev1beta1.CEXType {
	if p.Spec.CEXType == "" {
		return basev1beta1.CEXTypeEP11
	}
	return p.Spec.CEXType
}

// Release places the plugin in spec.namespace (default: the operator's)
// with the type, overcommit and config sets. The config sets are checked
// with the plugin's own validation, so a set the plugin would refuse is
// refused here, naming the field.
func (k *Kind) Release(obj service.Object, operatorNamespace string) (string, map[string]any, error) {
	p := as(obj)
	ns, values, err := service.NamespacedValues(&p.Spec.ServiceSpec, p.Spec.Namespace, operatorNamespace, k.DefaultImage)
	if err != nil {
		return "", nil, err
	}
	values["mode"] = string(cmp.Or(p.Spec.Mode, common.DeviceModeDevicePlugin))
	values["cexType"] = string(cexType(p))
	if p.Spec.Overcommit > 0 {
		values["overcommit"] = int64(p.Spec.Overcommit)
	}
	if len(p.Spec.ConfigSets) > 0 {
		cfg := cex.ConfigOf(&p.Spec)
		if err := cfg.Validate(); err != nil {
			return "", nil, fmt.Errorf("spec.%w", err)
		}
		data, err := json.Marshal(cfg)
		if err != nil {
			return "", nil, err
		}
		values["configSets"] = string(data)
		classes := make([]any, 0, len(p.Spec.ConfigSets))
		for _, set := range p.Spec.ConfigSets {
			classes = append(classes, map[string]any{"name": set.Name, "resource": cex.Resource(cex.Type(cexType(p)), set.Name)})
		}
		values["configSetClasses"] = classes
	}
	return ns, values, nil
}

// of is the CR's selector, its device spec and its status fields.
func of(p *basev1beta1.CEXPlugin) (common.NodeSelector, devices.Spec, devices.Fields) {
	return p.Spec.NodeSelector, specOf(cexType(p)).WithMode(p.Spec.Mode, tee.CEXDRADriver), fields(&p.Status)
}
