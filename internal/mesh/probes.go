package mesh

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cloister-cc/cloister/internal/mesh/annotation"
)

// AppHealthPath is where the admin port answers the kubelet's probes of
// meshed ports.
const AppHealthPath = annotation.AppHealthPath

// ParseAppProbe reads NAME=URL, a probe the proxy runs for the kubelet:
// the URL is the app's own, on loopback.
func ParseAppProbe(s string) (name, target string, err error) {
	name, target, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return "", "", fmt.Errorf("app probe %q: want NAME=URL", s)
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", "", fmt.Errorf("app probe %s: %w", name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() != "127.0.0.1" || u.Port() == "" {
		return "", "", fmt.Errorf("app probe %s: %q is not http(s)://127.0.0.1:PORT/PATH", name, target)
	}
	return name, target, nil
}

// probeTimeout bounds one probe of the app; the kubelet's own timeout
// (default 1 s) usually ends it first.
const probeTimeout = 10 * time.Second

// appProbes answers GET /app-health/NAME with the status the app gave
// its probe URL: as the kubelet would see it, 2xx and 3xx passing,
// redirects not followed, an HTTPS app's certificate not verified.
func appProbes(probes map[string]string) http.HandlerFunc {
	client := &http.Client{
		Timeout:       probeTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify a probed app either; this is loopback
			DisableKeepAlives: true,
		},
	}
	return func(w http.ResponseWriter, r *http.Request) {
		target, ok := probes[strings.TrimPrefix(r.URL.Path, AppHealthPath)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header.Set("User-Agent", r.Header.Get("User-Agent"))
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, "the app did not answer its probe", http.StatusServiceUnavailable)
			return
		}
		_ = resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	}
}
