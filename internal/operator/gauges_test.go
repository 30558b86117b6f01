package operator

import (
	"reflect"
	"strings"
	"testing"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/cexplugin"
	lascontroller "github.com/cloister-cc/cloister/internal/operator/controller/las"
	"github.com/cloister-cc/cloister/internal/operator/controller/nitroplugin"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/controller/sgxplugin"
)

// numericFields are the integer status fields (and maps of them, exported
// per node) of a kind's own status, by JSON name.
func numericFields(status any) []string {
	var out []string
	ty := reflect.TypeOf(status)
	for i := range ty.NumField() {
		f := ty.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous {
			continue // the common ServiceStatus: state is its own gauge
		}
		switch k := f.Type.Kind(); {
		case k == reflect.Int32:
			out = append(out, name)
		case k == reflect.Map && f.Type.Elem().Kind() == reflect.Int32:
			out = append(out, strings.TrimSuffix(name, "PerNode"))
		}
	}
	return out
}

// Every metric and alert field of a kind's status is a Prometheus gauge:
// a field added to the API without a gauge fails here.
func TestEveryStatusFieldIsAGauge(t *testing.T) {
	sgx := &basev1beta1.SGXPlugin{}
	sgx.Status.AvailableSGXDevicesPerNode = map[string]int32{"n": 1}
	sgx.Status.CapacitySGXDevicesPerNode = map[string]int32{"n": 1}
	sgx.Status.UsedSGXDevicesPerNode = map[string]int32{"n": 1}
	cex := &basev1beta1.CEXPlugin{}
	cex.Status.AvailableDevicesPerNode = map[string]int32{"n": 1}
	nitro := &basev1beta1.NitroPlugin{}
	nitro.Status.CapacityDevicesPerNode = map[string]int32{"n": 1}
	lasCR := &basev1beta1.LAS{}
	lasCR.Status.Nodes = map[string]basev1beta1.LASNode{"n": {Pod: "p", Ready: true}}
	for _, tt := range []struct {
		kind   service.Kind
		obj    service.Object
		status any
	}{
		{sgxplugin.New(service.Base{}), sgx, sgx.Status},
		{&lascontroller.Kind{}, lasCR, lasCR.Status},
		{cexplugin.New(service.Base{}), cex, cex.Status},
		{nitroplugin.New(service.Base{}), nitro, nitro.Status},
	} {
		exported := map[string]bool{}
		perNode := map[string]bool{}
		for _, s := range tt.kind.Metrics(tt.obj) {
			if s.Node == "" {
				exported[s.Field] = true
			} else {
				perNode[s.Field] = true
			}
		}
		for _, f := range numericFields(tt.status) {
			if !exported[f] {
				t.Errorf("%s: status field %s has no gauge", tt.kind.Name(), f)
			}
		}
		if len(perNode) == 0 {
			t.Errorf("%s: no per-node gauges", tt.kind.Name())
		}
	}
}
