package devices

import (
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Field is one number of a kind's status: its JSON name (which is also its
// metric's field name) and where it is kept.
type Field struct {
	Name  string
	Value *int32
}

// PerNode is a per-node map of a kind's status; its metric field is the
// total's.
type PerNode = *map[string]int32

// Fields are where a kind's status keeps the device numbers: the mapping a
// new device kind writes once.
type Fields struct {
	Capacity, Used, Available                      Field
	CapacityPerNode, UsedPerNode, AvailablePerNode PerNode
	Desired, Ready, DeviceAlert, ReplicaAlert      Field
}

// Fill writes the counts and replicas into the status.
func (f Fields) Fill(c Counts, r Replicas) {
	*f.Capacity.Value, *f.Used.Value, *f.Available.Value = c.Capacity, c.Used, c.Available
	*f.CapacityPerNode, *f.UsedPerNode, *f.AvailablePerNode = c.CapacityPerNode, c.UsedPerNode, c.AvailablePerNode
	*f.DeviceAlert.Value = int32(len(c.Exhausted)) //nolint:gosec // a count of nodes, far below 2^31
	*f.Desired.Value, *f.Ready.Value, *f.ReplicaAlert.Value = r.Desired, r.Ready, r.Alert
}

// Unknown marks every number as undeterminable (-1), as when the nodes or
// pods could not be read.
func (f Fields) Unknown() {
	for _, v := range f.totals() {
		*v.Value = -1
	}
}

func (f Fields) totals() []Field {
	return []Field{f.Available, f.Capacity, f.Used, f.Desired, f.Ready, f.DeviceAlert, f.ReplicaAlert}
}

// Samples are the fields as Prometheus samples: every total, and each
// per-node map labelled by node under its total's name.
func (f Fields) Samples() []metrics.Sample {
	var out []metrics.Sample
	for _, v := range f.totals() {
		out = append(out, metrics.Sample{Field: v.Name, Value: float64(*v.Value)})
	}
	for _, m := range []struct {
		name  string
		nodes PerNode
	}{{f.Available.Name, f.AvailablePerNode}, {f.Capacity.Name, f.CapacityPerNode}, {f.Used.Name, f.UsedPerNode}} {
		for node, v := range *m.nodes {
			out = append(out, metrics.Sample{Field: m.name, Node: node, Value: float64(v)})
		}
	}
	return out
}
