package dra

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the driver's Prometheus series.
type Metrics struct {
	Registry    *prometheus.Registry
	devices     *prometheus.GaugeVec
	prepared    prometheus.Gauge
	prepareTime *prometheus.HistogramVec
}

// NewMetrics creates the series in a registry of their own (plus the Go
// and process collectors), labelled with the driver.
func NewMetrics(driver string) *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	labels := prometheus.Labels{"driver": driver}
	m := &Metrics{
		Registry: r,
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cloister_dra_devices", Help: "Devices the driver publishes, by health.", ConstLabels: labels},
			[]string{"health"}),
		prepared: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cloister_dra_prepared_claims", Help: "Claims prepared on the node.", ConstLabels: labels}),
		prepareTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cloister_dra_prepare_seconds", Help: "Time to prepare one claim, by result.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"result"}),
	}
	r.MustRegister(m.devices, m.prepared, m.prepareTime)
	return m
}

func (m *Metrics) setDevices(healthy, all int) {
	m.devices.WithLabelValues("healthy").Set(float64(healthy))
	m.devices.WithLabelValues("unhealthy").Set(float64(all - healthy))
}

func (m *Metrics) observePrepare(d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.prepareTime.WithLabelValues(result).Observe(d.Seconds())
}
