package plugin

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the plugin's Prometheus series, per resource.
type Metrics struct {
	Registry      *prometheus.Registry
	capacity      *prometheus.GaugeVec
	healthy       *prometheus.GaugeVec
	allocated     *prometheus.GaugeVec
	registered    *prometheus.GaugeVec
	allocations   *prometheus.CounterVec
	allocateTime  *prometheus.HistogramVec
	registrations *prometheus.CounterVec
}

// NewMetrics creates the series in a registry of their own (plus the Go and
// process collectors).
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := func(name, help string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cloister_device_plugin_" + name, Help: help}, []string{"resource"})
		r.MustRegister(v)
		return v
	}
	m := &Metrics{
		Registry:   r,
		capacity:   g("capacity", "Devices the plugin offers, healthy or not."),
		healthy:    g("healthy", "Healthy devices the plugin offers."),
		allocated:  g("allocated", "Devices kubelet's pod-resources API reports assigned to containers."),
		registered: g("registered", "1 while the resource is registered with kubelet."),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloister_device_plugin_allocations_total", Help: "Allocate calls, by result.",
		}, []string{"resource", "result"}),
		allocateTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cloister_device_plugin_allocate_seconds", Help: "Time to answer kubelet's Allocate.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"resource"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloister_device_plugin_registrations_total", Help: "Registrations with kubelet, by result.",
		}, []string{"resource", "result"}),
	}
	r.MustRegister(m.allocations, m.allocateTime, m.registrations)
	return m
}

func (m *Metrics) setDevices(resource string, devs []Device) {
	m.capacity.WithLabelValues(resource).Set(float64(len(devs)))
	m.healthy.WithLabelValues(resource).Set(float64(countHealthy(devs)))
}

func (m *Metrics) setAllocated(resource string, n int) {
	m.allocated.WithLabelValues(resource).Set(float64(n))
}

func (m *Metrics) setRegistered(resource string, ok bool) {
	v, result := 0.0, "error"
	if ok {
		v, result = 1, "ok"
	}
	m.registered.WithLabelValues(resource).Set(v)
	m.registrations.WithLabelValues(resource, result).Inc()
}

func (m *Metrics) observeAllocate(resource string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.allocations.WithLabelValues(resource, result).Inc()
	m.allocateTime.WithLabelValues(resource).Observe(d.Seconds())
}

// Handler serves /metrics, /healthz and /readyz; ready reports whether the
// plugin is registered with kubelet (and why not).
func (m *Metrics) Handler(ready func() error) http.Handler { return Handler(m.Registry, ready) }

// Handler serves a registry's /metrics, /healthz and /readyz, ready
// saying whether the process serves the kubelet (and why not): the
// device plugins' and the DRA drivers' endpoint.
func Handler(reg *prometheus.Registry, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
