package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cloister-cc/cloister/api/common"
)

func TestMetricName(t *testing.T) {
	for field, want := range map[string]string{
		"sgxDeviceAlert":             "cloister_sgx_device_alert",
		"availableSGXDevicesPerNode": "cloister_available_sgx_devices_per_node",
		"capacitySGXDevices":         "cloister_capacity_sgx_devices",
		"lasReplicaAlert":            "cloister_las_replica_alert",
		"desiredNumberScheduled":     "cloister_desired_number_scheduled",
	} {
		if got := MetricName(field); got != want {
			t.Errorf("MetricName(%q) = %q, want %q", field, got, want)
		}
	}
}

func TestRecordReplacesAndForgets(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := NewRecorder(reg)
	r.Record("SGXPlugin", "", "sgx", common.StateUnhealthy, []Sample{
		{Field: "sgxDeviceAlert", Value: 1},
		{Field: "availableSGXDevices", Node: "sgx-0", Value: 0},
		{Field: "availableSGXDevices", Node: "sgx-5", Value: 110},
	})
	if got := testutil.ToFloat64(r.gauges["sgxDeviceAlert"].WithLabelValues("SGXPlugin", "", "sgx", "")); got != 1 {
		t.Errorf("sgxDeviceAlert = %v", got)
	}
	if got := testutil.ToFloat64(r.state.WithLabelValues("SGXPlugin", "", "sgx", "UNHEALTHY")); got != 1 {
		t.Errorf("state UNHEALTHY = %v", got)
	}
	// sgx-5 leaves the cluster: its series goes with it.
	r.Record("SGXPlugin", "", "sgx", common.StateHealthy, []Sample{
		{Field: "sgxDeviceAlert", Value: 0},
		{Field: "availableSGXDevices", Node: "sgx-0", Value: 110},
	})
	if n := testutil.CollectAndCount(r.gauges["availableSGXDevices"]); n != 1 {
		t.Errorf("%d availableSGXDevices series, want 1", n)
	}
	if got := testutil.ToFloat64(r.state.WithLabelValues("SGXPlugin", "", "sgx", "UNHEALTHY")); got != 0 {
		t.Errorf("state UNHEALTHY after recovery = %v", got)
	}
	r.Forget("SGXPlugin", "", "sgx")
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("%d series after Forget (%v)", n, err)
	}
}
