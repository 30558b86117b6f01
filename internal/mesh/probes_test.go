package mesh

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/mesh/meshtest"
)

// The kubelet's probe of a meshed port reaches the app through the admin
// port, and says what the app says.
func TestAppProbes(t *testing.T) {
	healthy := true
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || !healthy {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer app.Close()
	_, target, err := ParseAppProbe("web/readiness=" + app.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	meshtest.NewCA(t).Write(t, dir, "web.default")
	cfg := Config{Ingress: "DISABLED", Certs: dir, AdminPort: freePort(t, ""), AppProbes: map[string]string{"web/readiness": target}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Proxy(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	admin := fmt.Sprintf("http://127.0.0.1:%d", cfg.AdminPort)
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := get(admin + "/healthz"); code != http.StatusOK; code, _ = get(admin + "/healthz") {
		if time.Now().After(deadline) {
			t.Fatal("the proxy did not come up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := get(admin + AppHealthPath + "web/readiness"); code != http.StatusOK {
		t.Errorf("a healthy app's probe: %d", code)
	}
	healthy = false
	if code, _ := get(admin + AppHealthPath + "web/readiness"); code != http.StatusInternalServerError {
		t.Errorf("an unhealthy app's probe: %d", code)
	}
	if code, _ := get(admin + AppHealthPath + "web/liveness"); code != http.StatusNotFound {
		t.Errorf("a probe not configured: %d", code)
	}
	app.Close()
	if code, _ := get(admin + AppHealthPath + "web/readiness"); code != http.StatusServiceUnavailable {
		t.Errorf("a stopped app's probe: %d", code)
	}
}

func TestParseAppProbeRefuses(t *testing.T) {
	for _, bad := range []string{"web", "=http://127.0.0.1:1/", "x=http://10.0.0.1:80/", "x=file:///etc/passwd", "x=http://127.0.0.1/"} {
		if _, _, err := ParseAppProbe(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The forwarder relays its ports to the same ports of its target.
func TestForward(t *testing.T) {
	app, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Close() }()
	go func() {
		for {
			c, err := app.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("confidential pod"))
			_ = c.Close()
		}
	}()
	port := uint16(app.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port
	// The forwarder on 127.0.0.1, the app on 127.0.0.2, the same port.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Forward(ctx, ForwardConfig{To: "127.0.0.2", Ports: []uint16{port}, ListenHost: "127.0.0.1"}, slog.New(slog.DiscardHandler))
	}()
	var got []byte
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(got), "confidential pod") && time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			got, _ = io.ReadAll(c)
			_ = c.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if string(got) != "confidential pod" {
		t.Fatalf("through the forwarder: %q", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if err := Forward(context.Background(), ForwardConfig{To: "x"}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a forwarder without ports started")
	}
}
