package operator

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// apiRequests counts the operator's API requests by verb and resource, so
// "an idle cluster sees no writes" can be measured, not assumed.
var apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "cloister_operator_api_requests_total",
	Help: "API requests the operator made, by HTTP method and resource.",
}, []string{"method", "resource"})

func countWrites(cfg *rest.Config, reg prometheus.Registerer) {
	_ = reg.Register(apiRequests)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			apiRequests.WithLabelValues(req.Method, resourceOf(req.URL.Path)).Inc()
			return rt.RoundTrip(req)
		})
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// resourceOf extracts the resource (and subresource) from an API path:
// /apis/apps/v1/namespaces/x/daemonsets/y -> daemonsets,
// /apis/base.cloister.dev/v1beta1/sgxplugins/a/status -> sgxplugins/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other"
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		if len(parts) == 2 {
			return "namespaces"
		}
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "other"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}
