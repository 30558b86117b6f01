package mesh

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/mesh/meshtest"
	"github.com/cloister-cc/cloister/internal/mesh/proxy"
)

func freePort(t *testing.T, host string) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return uint16(ln.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port, below 65536
}

func get(url string) (int, string) {
	resp, err := http.Get(url) //nolint:gosec // the test's own admin URL
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The sidecar: not healthy until the initializer's certificates are
// there; then the app's egress address reaches an mTLS upstream of the
// mesh, and /metrics counts the connection.
func TestProxy(t *testing.T) {
	ca := meshtest.NewCA(t)
	backendDir, podDir := t.TempDir(), t.TempDir()
	ca.Write(t, backendDir, "backend.default")
	// The backend: an echo app behind an mTLS ingress.
	app, err := net.Listen("tcp", "127.0.0.1:0")
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
			go func() {
				if _, err := io.Copy(c, c); err != nil {
					t.Error(err)
				}
				_ = c.Close()
			}()
		}
	}()
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = (&proxy.Proxy{Log: slog.New(slog.DiscardHandler)}).Ingress(ctx, backend, proxy.Fixed(app.Addr().String(), (&proxy.Certs{Dir: backendDir}).ServerConfig(true)))
	}()

	egress := fmt.Sprintf("127.0.0.2:%d", freePort(t, "127.0.0.2"))
	cfg := Config{Ingress: "main#8001#false", Egress: "backend#" + egress + "#" + backend.Addr().String(), Certs: podDir,
		ProxyPort: freePort(t, ""), AdminPort: freePort(t, "")}
	done := make(chan error, 1)
	go func() { done <- Proxy(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	admin := fmt.Sprintf("http://127.0.0.1:%d", cfg.AdminPort)
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := get(admin + "/healthz"); code != http.StatusServiceUnavailable; code, _ = get(admin + "/healthz") {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz before the certificates: %d, want 503", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ca.Write(t, podDir, "web.default")
	if code, body := get(admin + "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with certificates: %d %s", code, body)
	}

	conn, err := net.Dial("tcp", egress)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("through the mesh")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("through the mesh"))
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "through the mesh" {
		t.Errorf("egress: %q %v", buf, err)
	}
	_ = conn.Close() // a network peer may have closed first
	if _, body := get(admin + "/metrics"); !strings.Contains(body, `cloister_mesh_connections_total{direction="egress",outcome="forwarded"} 1`) {
		t.Errorf("/metrics:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("proxy: %v", err)
	}
}

// The redirect leaves the plain ports and the admin port alone.
func TestRules(t *testing.T) {
	r, err := Config{Ingress: "main#8001#false##metrics#8080#true", ProxyPort: 15006, AdminPort: 15000}.Rules()
	if err != nil || r.ProxyPort != 15006 || fmt.Sprint(r.Exclude) != "[8080 15000]" {
		t.Errorf("%+v %v", r, err)
	}
	if _, err := (Config{Egress: "backend#10.0.0.1:1#x:1"}).Rules(); err == nil || !strings.Contains(err.Error(), "egress entry 1") {
		t.Errorf("a bad egress entry: %v", err)
	}
}
