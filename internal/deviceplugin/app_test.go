package deviceplugin

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/deviceplugin/kubelettest"
	"github.com/cloister-cc/cloister/internal/deviceplugin/plugin"
)

func run(ctx context.Context, stderr io.Writer, args ...string) error {
	cmd := NewCommand()
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(stderr)
	return cmd.ExecuteContext(ctx)
}

func TestBadInputExitsNamingTheProblem(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	dir := t.TempDir()
	dup := filepath.Join(dir, "dup.yaml")
	if err := os.WriteFile(dup, []byte("configSets:\n- {name: a, apqns: [{adapter: 1, domain: 2}]}\n- {name: b, apqns: [{adapter: 1, domain: 2}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	domain := filepath.Join(dir, "domain.yaml")
	if err := os.WriteFile(domain, []byte(`{"configSets":[{"name":"a","apqns":[{"adapter":1,"domain":300}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tpm"}, `unknown command "tpm"`},
		{nil, "name a mode: sgx, cex or nitro"},
		{[]string{"sgx", "--capacity", "0"}, "--capacity (capacitySGXPods) must be between 1 and 10000"},
		{[]string{"sgx", "--capacity", "10001"}, "must be between 1 and 10000"},
		{[]string{"cex", "-t", "ep12"}, `unknown CEX type "ep12"`},
		{[]string{"cex", "--overcommit", "101"}, "--overcommit must be between 1 and 100"},
		{[]string{"cex", "--config-sets", dup}, "duplicate APQN 01.0002 (adapter 1, domain 2), already in set \"a\""},
		{[]string{"cex", "--config-sets", domain}, "domain 300: out of range 0..255"},
		{[]string{"nitro", "--enclaves", "5"}, "--enclaves must be between 1 and 4"},
		{[]string{"sgx", "--capacity", "1", "--log-level", "loud"}, `invalid --log-level "loud"`},
		{[]string{"sgx", "--capacity", "1", "--rescan-interval", "10ms"}, "--rescan-interval 10ms is too short"},
		{[]string{"sgx", "--capacity", "1", "--plugin-dir", filepath.Join(dir, "none")}, "--plugin-dir"},
		{[]string{"dra"}, "name a family: sgx, cex or nitro"},
		{[]string{"dra", "sgx"}, "NODE_NAME is not set"},
		{[]string{"dra", "cex", "--overcommit", "0"}, "--overcommit must be between 1 and 100"},
		{[]string{"dra", "cex", "--config-sets", domain}, "domain 300: out of range 0..255"},
		{[]string{"dra", "nitro", "--enclaves", "0"}, "--enclaves 0 is out of range: use 1..4"},
	} {
		args := append(slices.Clone(tc.args), "--metrics-address", "")
		if !slices.Contains(args, "--plugin-dir") {
			args = append(args, "--plugin-dir", dir)
		}
		// A plugin that wrongly starts is stopped after a while.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := run(ctx, io.Discard, args...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestCEXTypeFromEnvironment(t *testing.T) {
	t.Setenv("CEXTYPE", "bogus")
	err := run(context.Background(), io.Discard, "cex", "--plugin-dir", t.TempDir(), "--metrics-address", "")
	if err == nil || !strings.Contains(err.Error(), `unknown CEX type "bogus"`) {
		t.Errorf("CEXTYPE ignored: %v", err)
	}
}

func freeAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// TestServesUntilCancelled runs the sgx mode as the binary would: it
// registers, /readyz turns ready and /metrics shows the resource; SIGTERM
// (a cancelled context) stops it cleanly and removes its sockets.
func TestServesUntilCancelled(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	pluginDir, err := os.MkdirTemp("", "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(pluginDir) }()
	dev := t.TempDir()
	if err := os.WriteFile(filepath.Join(dev, "sgx_enclave"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	k := kubelettest.Start(t, pluginDir)
	addr := freeAddress(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr testenv.Buffer
	go func() {
		done <- run(ctx, &stderr, "sgx", "--capacity", "5", "--dev-root", dev, "--plugin-dir", pluginDir,
			"--pod-resources-socket", "", "--metrics-address", addr)
	}()
	k.WaitListed(t, "sgx.cloister.dev/enclave", "sgx_enclave-0:Healthy sgx_enclave-1:Healthy sgx_enclave-2:Healthy sgx_enclave-3:Healthy sgx_enclave-4:Healthy")
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get("/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `cloister_device_plugin_capacity{resource="sgx.cloister.dev/enclave"} 5`) {
		t.Errorf("/metrics lacks the capacity:\n%s", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop")
	}
	if _, err := os.Stat(filepath.Join(pluginDir, plugin.SocketName("sgx.cloister.dev/enclave"))); !os.IsNotExist(err) {
		t.Errorf("socket left: %v", err)
	}
	if !strings.Contains(stderr.String(), `"msg":"registered with kubelet"`) {
		t.Errorf("no structured registration log:\n%s", stderr.String())
	}
}

// TestBadConfigUpdateKeepsLastGood: a malformed config sets file written
// while the plugin runs is logged and the running configuration stays.
func TestBadConfigUpdateKeepsLastGood(t *testing.T) {
	pluginDir, err := os.MkdirTemp("", "app")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(pluginDir) }()
	sys := t.TempDir()
	card := filepath.Join(sys, "devices/ap/card05")
	if err := os.MkdirAll(filepath.Join(card, "05.0012"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(card, "type"), []byte("CEX8P\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(card, "05.0012/online"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgDir := t.TempDir()
	cfg := filepath.Join(cfgDir, "sets.yaml")
	if err := os.WriteFile(cfg, []byte("configSets:\n- {name: pay, apqns: [{adapter: 5, domain: 18}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k := kubelettest.Start(t, pluginDir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, &stderr, "cex", "--sys-root", sys, "--dev-root", t.TempDir(), "--plugin-dir", pluginDir,
			"--config-sets", cfg, "--pod-resources-socket", "", "--metrics-address", "")
	}()
	k.WaitListed(t, "ibm.com/cex-ep11-pay", "05.0012-0:Healthy")
	if err := os.WriteFile(cfg, []byte("configSets:\n- {name: pay, apqns: [{adapter: 5, domain: 300}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(stderr.String(), "keeping the last good configuration") {
		if time.Now().After(deadline) {
			t.Fatalf("no log about the bad update:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "domain 300: out of range") {
		t.Errorf("the log does not say why:\n%s", stderr.String())
	}
	if got := k.Listed("ibm.com/cex-ep11-pay"); got != "05.0012-0:Healthy" {
		t.Errorf("after a bad update: %q", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("exit: %v", err)
	}
}
