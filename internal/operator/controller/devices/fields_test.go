package devices

import (
	"slices"
	"testing"

	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

type status struct {
	capacity, used, available, desired, ready, deviceAlert, replicaAlert int32
	capacityPerNode, usedPerNode, availablePerNode                       map[string]int32
}

func (s *status) fields() Fields {
	return Fields{
		Capacity: Field{"capacityX", &s.capacity}, Used: Field{"usedX", &s.used}, Available: Field{"availableX", &s.available},
		CapacityPerNode: &s.capacityPerNode, UsedPerNode: &s.usedPerNode, AvailablePerNode: &s.availablePerNode,
		Desired: Field{"desiredReplicas", &s.desired}, Ready: Field{"readyReplicas", &s.ready},
		DeviceAlert: Field{"xDeviceAlert", &s.deviceAlert}, ReplicaAlert: Field{"xReplicaAlert", &s.replicaAlert},
	}
}

// The mapping writes where the kind keeps each number, and the samples
// carry the kind's own field names, per node under the total's name.
func TestFieldsFillAndSamples(t *testing.T) {
	var s status
	f := s.fields()
	f.Fill(Counts{Capacity: 8, Used: 3, Available: 5,
		CapacityPerNode: map[string]int32{"a": 8}, UsedPerNode: map[string]int32{"a": 3}, AvailablePerNode: map[string]int32{"a": 5},
		Exhausted: []string{"b"}}, Replicas{Desired: 2, Ready: 1, Alert: 1})
	if s.capacity != 8 || s.used != 3 || s.available != 5 || s.deviceAlert != 1 || s.desired != 2 || s.ready != 1 || s.replicaAlert != 1 || s.availablePerNode["a"] != 5 {
		t.Fatalf("filled %+v", s)
	}
	got := f.Samples()
	for _, want := range []metrics.Sample{
		{Field: "capacityX", Value: 8}, {Field: "xDeviceAlert", Value: 1}, {Field: "xReplicaAlert", Value: 1},
		{Field: "availableX", Node: "a", Value: 5}, {Field: "usedX", Node: "a", Value: 3},
	} {
		if !slices.Contains(got, want) {
			t.Errorf("samples %v lack %v", got, want)
		}
	}
	f.Unknown()
	for _, v := range []int32{s.capacity, s.used, s.available, s.desired, s.ready, s.deviceAlert, s.replicaAlert} {
		if v != -1 {
			t.Errorf("Unknown left %d, want -1 everywhere: %+v", v, s)
		}
	}
}
