// Package metrics exports the metric and alert fields of every service CR's
// status as Prometheus gauges (cloister_<field>{kind,namespace,name,node}),
// plus cloister_state{kind,namespace,name,state}.
package metrics

import (
	"strings"
	"sync"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloister-cc/cloister/api/common"
)

// Sample is one value of a status field; Node is empty for cluster totals.
type Sample struct {
	Field string
	Node  string
	Value float64
}

var labelNames = []string{"kind", "namespace", "name", "node"}

type objectKey struct{ kind, namespace, name string }

type series struct{ field, node string }

// Recorder keeps the gauges of all CRs.
type Recorder struct {
	reg prometheus.Registerer

	mu     sync.Mutex
	gauges map[string]*prometheus.GaugeVec
	state  *prometheus.GaugeVec
	seen   map[objectKey]map[series]bool
}

// NewRecorder registers the state gauge with reg; field gauges are
// registered as fields first appear.
func NewRecorder(reg prometheus.Registerer) *Recorder {
	r := &Recorder{
		reg:    reg,
		gauges: map[string]*prometheus.GaugeVec{},
		seen:   map[objectKey]map[series]bool{},
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cloister_state",
			Help: "1 for the state a Cloister CR is in (HEALTHY, PENDING or UNHEALTHY), 0 for the others.",
		}, []string{"kind", "namespace", "name", "state"}),
	}
	reg.MustRegister(r.state)
	return r
}

// MetricName is the gauge of a status field: cloister_ and the field in
// snake case, e.g. sgxDeviceAlert -> cloister_sgx_device_alert.
func MetricName(field string) string {
	var b strings.Builder
	b.WriteString("cloister_")
	runes := []rune(field)
	for i, c := range runes {
		if unicode.IsUpper(c) {
			// A new word starts at an upper-case letter that follows a
			// lower-case one or precedes one (SGXDevices -> sgx_devices).
			if i > 0 && (unicode.IsLower(runes[i-1]) || (i+1 < len(runes) && unicode.IsLower(runes[i+1]) && unicode.IsUpper(runes[i-1]))) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (r *Recorder) gauge(field string) *prometheus.GaugeVec {
	if g, ok := r.gauges[field]; ok {
		return g
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricName(field),
		Help: "The " + field + " status field of Cloister CRs; -1 when it cannot be determined.",
	}, labelNames)
	r.reg.MustRegister(g)
	r.gauges[field] = g
	return g
}

// Record sets the gauges of one CR and drops its series that are gone
// (e.g. of a node that left the cluster).
func (r *Recorder) Record(kind, namespace, name string, state common.State, samples []Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := objectKey{kind, namespace, name}
	now := map[series]bool{}
	for _, s := range samples {
		r.gauge(s.Field).WithLabelValues(kind, namespace, name, s.Node).Set(s.Value)
		now[series{s.Field, s.Node}] = true
	}
	for old := range r.seen[key] {
		if !now[old] {
			r.gauges[old.field].DeleteLabelValues(kind, namespace, name, old.node)
		}
	}
	r.seen[key] = now
	for _, st := range []common.State{common.StateHealthy, common.StatePending, common.StateUnhealthy} {
		v := 0.0
		if st == state {
			v = 1
		}
		r.state.WithLabelValues(kind, namespace, name, string(st)).Set(v)
	}
}

// Forget drops every series of a deleted CR.
func (r *Recorder) Forget(kind, namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := objectKey{kind, namespace, name}
	for s := range r.seen[key] {
		r.gauges[s.field].DeleteLabelValues(kind, namespace, name, s.node)
	}
	delete(r.seen, key)
	r.state.DeletePartialMatch(prometheus.Labels{"kind": kind, "namespace": namespace, "name": name})
}
