package collateral

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a cache's health: the series an alert on stale or
// expired collateral watches.
type Collector struct {
	cache                   *Cache
	entries, stale, expired *prometheus.Desc
	nextUpdate              *prometheus.Desc
}

// NewCollector exports cache's health.
func NewCollector(cache *Cache) *Collector {
	return &Collector{
		cache:      cache,
		entries:    prometheus.NewDesc("cloister_collateral_entries", "Vendor collateral entries in the cache.", nil, nil),
		stale:      prometheus.NewDesc("cloister_collateral_stale_entries", "Entries served from the cache while their vendor fails.", nil, nil),
		expired:    prometheus.NewDesc("cloister_collateral_expired_entries", "Entries past their next update with no newer copy: evidence that needs them is refused.", nil, nil),
		nextUpdate: prometheus.NewDesc("cloister_collateral_next_update_timestamp_seconds", "The earliest next update of any entry (Unix seconds).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.stale
	ch <- c.expired
	ch <- c.nextUpdate
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	h := c.cache.Health()
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(h.Entries))
	ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, float64(h.Stale))
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.GaugeValue, float64(h.Expired))
	if !h.NextUpdate.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.nextUpdate, prometheus.GaugeValue, float64(h.NextUpdate.Unix()))
	}
}
