package core

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// Metrics are CAS's Prometheus series.
type Metrics struct {
	Registry      *prometheus.Registry
	attestations  *prometheus.CounterVec
	attestSeconds prometheus.Histogram
	policies      prometheus.Gauge
	policyChanges *prometheus.CounterVec
	state         *prometheus.GaugeVec
	mark          prometheus.Gauge
	problem       *prometheus.GaugeVec
	transit       *prometheus.CounterVec
}

// NewMetrics registers CAS's series in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		attestations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloister_cas_attestations_total", Help: "Attestations by result and, for rejections, the failing check.",
		}, []string{"result", "reason"}),
		attestSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cloister_cas_attest_seconds", Help: "Time to verify evidence and issue a certificate.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		policies: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cloister_cas_policies", Help: "Registered policies."}),
		policyChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloister_cas_policy_changes_total", Help: "Policy submissions by result (accepted, refused).",
		}, []string{"result"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cloister_cas_state", Help: "1 for CAS's current state (uninitialized, recovery, ready).",
		}, []string{"state"}),
		mark: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cloister_cas_state_mark", Help: "The highest generation of the state this replica served (its high-water mark).",
		}),
		problem: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cloister_cas_state_problem", Help: "1 while a replica refuses the state: rolled-back (older than its high-water mark), lost (gone) or replaced (another CAS's).",
		}, []string{"problem"}),
		transit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloister_cas_transit_total", Help: "Operations of Vault's transit seal by operation (encrypt, decrypt) and result (done, refused, invalid, not-found, error).",
		}, []string{"op", "result"}),
	}
	m.Registry.MustRegister(m.attestations, m.attestSeconds, m.policies, m.policyChanges, m.state, m.mark, m.problem, m.transit)
	return m
}

func (m *Metrics) setProblem(p string) {
	for _, x := range []string{wire.ProblemRolledBack, wire.ProblemLost, wire.ProblemReplaced} {
		v := 0.0
		if x == p {
			v = 1
		}
		m.problem.WithLabelValues(x).Set(v)
	}
}

func (m *Metrics) setState(s wire.State) {
	for _, x := range []wire.State{wire.Uninitialized, wire.RecoveryMode, wire.Ready} {
		v := 0.0
		if x == s {
			v = 1
		}
		m.state.WithLabelValues(string(x)).Set(v)
	}
}
