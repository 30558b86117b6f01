package supervisor_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/enclave"
	"github.com/cloister-cc/cloister/internal/enclave/eif"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
	"github.com/cloister-cc/cloister/internal/enclave/supervisor"
)

// asOrchestrator makes this test binary the simulated enclave's program.
const asOrchestrator = "CLOISTER_ENCLAVE_TEST_ORCHESTRATOR"

// asPlugin makes this test binary a plugin that serves $PORT on loopback
// and answers each connection with what $EGRESS (through the enclave's
// egress) says.
const asPlugin = "CLOISTER_ENCLAVE_TEST_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(asPlugin) == "1" {
		servePlugin()
		return
	}
	if os.Getenv(asOrchestrator) == "1" {
		// As cloister-enclave's startup: SIGTERM (the supervisor's stop)
		// ends the orchestrator, which ends its plugins first.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		os.Exit(startup.Code("orchestrator", enclave.Run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
	}
	os.Exit(m.Run())
}

func writeManifest(t *testing.T, path string, m *manifest.Manifest) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, m.JSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Swapped in at once, as the kubelet updates a mounted ConfigMap.
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func plugin(name, script, policy string, env ...manifest.Env) manifest.Plugin {
	return manifest.Plugin{Name: name, Image: "registry.example/" + name + ":1", Command: []string{"/bin/sh", "-c", script}, Env: env, RestartPolicy: policy}
}

// The whole pod-side path with the sim backend: the orchestrator a real
// child process on a unix socket, the probes over the supervisor's socket;
// started and ready once the plugins run; a changed configuration
// re-synced in place; a boot change left to new pods; a plugin failing
// for good makes the pod unready, naming it; evidence from the enclave;
// the enclave dying ends the supervisor with an error.
func TestSupervisorWithSimulatedEnclave(t *testing.T) {
	t.Setenv(asOrchestrator, "1")
	dir := t.TempDir()
	manifestPath := filepath.Join(dir, "manifest.json")
	m := &manifest.Manifest{Version: manifest.Version, Enclave: manifest.Size{CPUs: 2, MemoryMiB: 2048}, Plugins: []manifest.Plugin{
		plugin("api", "echo $MODE > "+filepath.Join(dir, "mode")+"; echo api says $MODE; exec sleep 60", "Always", manifest.Env{Name: "MODE", Value: "one"}),
		plugin("job", "exit 0", "Never"),
	}}
	writeManifest(t, manifestPath, m)
	logs, console := &testenv.Buffer{}, &testenv.Buffer{}
	s := &supervisor.Supervisor{
		// The console, as a Nitro Enclave's, is written only in debug
		// mode: the enclave's log reaches the pod through EnclaveLog.
		Backend:  &supervisor.Sim{Program: []string{os.Args[0], "orchestrator", "--simulation"}, Dir: dir, Stdout: console, Stderr: console},
		Manifest: manifestPath, Log: slog.New(slog.NewJSONHandler(logs, nil)), Interval: 50 * time.Millisecond, EnclaveLog: logs,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	socket := filepath.Join(dir, "supervisor.sock")
	go func() { _ = s.Serve(ctx, socket) }()
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()

	get := func(path string) (int, string) {
		t.Helper()
		code, body, _, err := supervisor.Get(ctx, socket, path)
		if err != nil {
			return 0, err.Error()
		}
		return code, string(body)
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened; log:\n%s", what, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	eventually("started and ready", func() bool {
		c1, _ := get(supervisor.PathStarted)
		c2, _ := get(supervisor.PathReady)
		return c1 == http.StatusOK && c2 == http.StatusOK
	})
	mode := func() string { b, _ := os.ReadFile(filepath.Join(dir, "mode")); return strings.TrimSpace(string(b)) }
	eventually("api ran with MODE=one", func() bool { return mode() == "one" })
	eventually("the plugin's line in the pod's log, followed out of the enclave", func() bool {
		return strings.Contains(logs.String(), `"msg":"api says one","component":"enclave-orchestrator","plugin":"api","stream":"stdout"`)
	})
	if console.String() != "" {
		t.Errorf("the console of an enclave not in debug mode was written:\n%s", console.String())
	}

	// Only configuration changed: synced in place, no new enclave.
	m.Plugins[0].Env[0].Value = "two"
	writeManifest(t, manifestPath, m)
	eventually("api restarted with MODE=two", func() bool { return mode() == "two" })
	eventually("the orchestrator's log of the in-place apply", func() bool {
		return strings.Contains(logs.String(), `"msg":"manifest applied in place","component":"enclave-orchestrator"`)
	})

	// What the enclave boots with changed: this enclave keeps its manifest.
	bigger := *m
	bigger.Enclave.MemoryMiB = 4096
	writeManifest(t, manifestPath, &bigger)
	eventually("the boot change logged", func() bool {
		return strings.Contains(logs.String(), "the manifest changed what the enclave boots with")
	})

	// Evidence through the pod's socket.
	code, body, h, err := supervisor.Get(ctx, socket, supervisor.PathEvidence+"?nonce=abcd")
	if err != nil || code != http.StatusOK || h.Get("Cloister-Evidence-Type") != string(attest.Sim) {
		t.Fatalf("evidence: %d %v %v", code, err, h)
	}
	claims, err := sim.Verify(body, time.Now())
	if err != nil || !claims.Insecure || claims.Nitro == nil || string(claims.Nitro.PCRs[manifest.PCRImage]) != string(m.SimPCRs()[manifest.PCRImage]) {
		t.Errorf("evidence claims %+v, %v", claims, err)
	}

	// A plugin failing for good: not ready, and the probe says which.
	m.Plugins[1] = plugin("job", "exit 7", "Never")
	writeManifest(t, manifestPath, m)
	eventually("unready naming job", func() bool {
		c, b := get(supervisor.PathReady)
		return c == http.StatusServiceUnavailable && strings.Contains(b, "plugin job failed: exited with code 7")
	})
	if c, _ := get(supervisor.PathStarted); c != http.StatusOK {
		t.Error("a started enclave reads as not started after a failure")
	}
	if !strings.Contains(logs.String(), `"msg":"health check: enclave unhealthy"`) {
		t.Errorf("the supervisor did not log the failed health check:\n%s", logs.String())
	}

	// The enclave dies: the supervisor ends with an error.
	pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	killed := false
	for _, p := range pids {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), "orchestrator\x00--simulation\x00--listen\x00"+filepath.Join(dir, supervisor.SocketName)) {
			pid := filepath.Base(filepath.Dir(p))
			n, _ := strconv.Atoi(pid)
			proc, _ := os.FindProcess(n)
			killed = proc.Kill() == nil
		}
	}
	if !killed {
		t.Fatal("found no orchestrator process to kill")
	}
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "the enclave stopped") {
			t.Errorf("Run after the enclave died: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the supervisor kept running without its enclave")
	}
}

// The nitro backend against a fake nitro-cli: the enclave is run with the
// manifest's size, its ID and CID read past nitro-cli's progress lines;
// an enclave that stops running ends Done; Stop terminates it.
func TestNitroBackendWithFakeCLI(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	state := filepath.Join(dir, "state")
	cli := filepath.Join(dir, "nitro-cli")
	script := `#!/bin/sh
echo "$*" >> ` + calls + `
case "$1" in
run-enclave)
  echo "Start allocating memory..."
  echo "Started enclave with enclave-cid: 16, memory: 4096 MiB, cpu-ids: [1, 3]"
  echo '{"EnclaveName":"e","EnclaveID":"i-0abc-enc0def","ProcessID":42,"EnclaveCID":16,"NumberOfCPUs":4,"CPUIDs":[1,3],"MemoryMiB":4096}'
  echo RUNNING > ` + state + ` ;;
describe-enclaves)
  echo "[{\"EnclaveID\":\"i-0abc-enc0def\",\"State\":\"$(cat ` + state + `)\"}]" ;;
terminate-enclave)
  echo TERMINATING > ` + state + ` ;;
esac
`
	if err := os.WriteFile(cli, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	n := &supervisor.Nitro{CLI: cli, EIFPath: "/enclave/enclave.eif", Port: 5005, Poll: 20 * time.Millisecond}
	m := &manifest.Manifest{Version: manifest.Version, Enclave: manifest.Size{CPUs: 4, MemoryMiB: 4096, Debug: true}}
	enc, err := n.Boot(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if enc.ID() != "i-0abc-enc0def" {
		t.Errorf("enclave ID %q", enc.ID())
	}
	b, _ := os.ReadFile(calls)
	if !strings.HasPrefix(string(b), "run-enclave --eif-path /enclave/enclave.eif --cpu-count 4 --memory 4096 --debug-mode\n") {
		t.Errorf("nitro-cli calls:\n%s", b)
	}
	select {
	case <-enc.Done():
		t.Fatalf("a running enclave reads as stopped: %v", enc.Err())
	case <-time.After(100 * time.Millisecond):
	}
	// It stops by itself (say, it crashed).
	if err := os.WriteFile(state, []byte("TERMINATING\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-enc.Done():
		if !strings.Contains(enc.Err().Error(), "i-0abc-enc0def is TERMINATING") {
			t.Errorf("Err %v", enc.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stopped enclave still reads as running")
	}
	if err := enc.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(calls)
	if !strings.Contains(string(b), "terminate-enclave --enclave-id i-0abc-enc0def\n") {
		t.Errorf("nitro-cli calls:\n%s", b)
	}

	// nitro-cli failing says why.
	n.CLI = "/bin/false"
	if _, err := n.Boot(context.Background(), m); err == nil || !strings.Contains(err.Error(), "nitro-cli run-enclave") {
		t.Errorf("failing nitro-cli: %v", err)
	}
}

// With PCRs in the manifest, the supervisor measures the image file
// before nitro-cli sees it: an image file of another build is refused,
// and nitro-cli is never run; the one built for the resource boots.
func TestNitroBootsOnlyTheImageFileOfItsPCRs(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	cli := filepath.Join(dir, "nitro-cli")
	script := "#!/bin/sh\necho \"$*\" >> " + calls + "\necho '{\"EnclaveID\":\"i-1-enc2\",\"EnclaveCID\":17}'\n"
	if err := os.WriteFile(cli, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	img := &eif.Image{Kernel: []byte("kernel"), Cmdline: "console=ttyS0", Ramdisks: [][]byte{[]byte("boot"), []byte("app")}}
	file := filepath.Join(dir, "enclave.eif")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	pcrs, err := img.Write(f)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	p0, p1, p2 := pcrs.Hex()
	n := &supervisor.Nitro{CLI: cli, EIFPath: file, Port: 5005, Poll: time.Hour}
	other := strings.Repeat("0", 96)
	m := &manifest.Manifest{Version: manifest.Version, Enclave: manifest.Size{CPUs: 2, MemoryMiB: 512, PCRs: &manifest.PCRs{PCR0: p0, PCR1: p1, PCR2: other}}}
	if _, err := n.Boot(context.Background(), m); err == nil || !strings.Contains(err.Error(), "not the PCRs of spec.enclave.pcrs") {
		t.Fatalf("an image file of other PCRs: %v", err)
	}
	if _, err := os.Stat(calls); !os.IsNotExist(err) {
		t.Fatal("nitro-cli ran for an image file of other PCRs")
	}
	m.Enclave.PCRs.PCR2 = p2
	enc, err := n.Boot(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if enc.ID() != "i-1-enc2" {
		t.Errorf("enclave %q", enc.ID())
	}
	_ = enc.Stop(context.Background())
}

// slowWriter is a pod log that keeps up slower than a plugin floods.
type slowWriter struct {
	mu    sync.Mutex
	lines int
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	w.mu.Lock()
	w.lines++
	w.mu.Unlock()
	return len(p), nil
}

// A plugin that floods its output loses its oldest lines inside the
// enclave, counted in the pod's log, and the pod keeps up at its pace.
func TestAFloodingPluginLosesLinesNotMemory(t *testing.T) {
	t.Setenv(asOrchestrator, "1")
	dir := t.TempDir()
	manifestPath := filepath.Join(dir, "manifest.json")
	m := &manifest.Manifest{Version: manifest.Version, Enclave: manifest.Size{CPUs: 2, MemoryMiB: 2048}, Plugins: []manifest.Plugin{
		plugin("flood", "yes 'a line of a plugin that floods its output' | head -n 300000; exec sleep 60", "Always"),
	}}
	writeManifest(t, manifestPath, m)
	logs := &testenv.Buffer{}
	pod := &slowWriter{}
	s := &supervisor.Supervisor{
		Backend:  &supervisor.Sim{Program: []string{os.Args[0], "orchestrator", "--simulation"}, Dir: dir},
		Manifest: manifestPath, Log: slog.New(slog.NewJSONHandler(logs, nil)), Interval: 50 * time.Millisecond, EnclaveLog: pod,
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Run stops the enclave when ctx ends: wait for it, or the test's
	// process ends first and leaves the orchestrator and its plugins.
	ran := make(chan struct{})
	defer func() { cancel(); <-ran }()
	go func() { _ = s.Run(ctx); close(ran) }()
	// A bound, not a measure: beside a build on two cores the flood and
	// its follower both crawl (seen: nothing lost within 30 s).
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(logs.String(), `"msg":"the enclave's log lost lines that came faster than they were read"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no lost lines counted; log:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	pod.mu.Lock()
	defer pod.mu.Unlock()
	if pod.lines == 0 || pod.lines >= 300000 {
		t.Errorf("%d of 300000 lines reached the pod's log", pod.lines)
	}
}

func servePlugin() {
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			out, err := net.Dial("tcp", os.Getenv("EGRESS"))
			if err != nil {
				_, _ = fmt.Fprintf(c, "egress: %v\n", err)
				return
			}
			reply, _ := io.ReadAll(out)
			_ = out.Close()
			_, _ = fmt.Fprintf(c, "plugin got: %s", reply)
		}()
	}
}

func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return int32(ln.Addr().(*net.TCPAddr).Port) //nolint:gosec // a port
}

// The enclave's network, with the sim backend as a real child process
// and unix sockets for vsock: a client reaches a plugin's port at the
// pod's address (relayed into the enclave, where the plugin listens on
// loopback only), and the plugin reaches an address outside through its
// egress; the pod is ready only once the port answers inside.
func TestPluginPortsAndEgressThroughTheChannel(t *testing.T) {
	t.Setenv(asOrchestrator, "1")
	outside, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = outside.Close() }()
	go func() {
		for {
			c, err := outside.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("outside says hi\n"))
			_ = c.Close()
		}
	}()
	dir := t.TempDir()
	manifestPath := filepath.Join(dir, "manifest.json")
	port, egress := freePort(t), freePort(t)
	web := manifest.Plugin{Name: "web", Image: "registry.example/web:1", Command: []string{os.Args[0]}, RestartPolicy: "Always",
		Env:   []manifest.Env{{Name: asPlugin, Value: "1"}, {Name: "PORT", Value: fmt.Sprint(port)}, {Name: "EGRESS", Value: fmt.Sprintf("127.0.0.1:%d", egress)}},
		Ports: []manifest.Port{{Port: port, Protocol: "TCP"}}}
	m := &manifest.Manifest{Version: manifest.Version, Enclave: manifest.Size{CPUs: 2, MemoryMiB: 2048}, Plugins: []manifest.Plugin{web},
		Egress: []manifest.Egress{{Name: "out", Port: egress, Address: outside.Addr().String()}}}
	writeManifest(t, manifestPath, m)
	logs := &testenv.Buffer{}
	s := &supervisor.Supervisor{
		Backend:  &supervisor.Sim{Program: []string{os.Args[0], "orchestrator", "--simulation"}, Dir: dir},
		Manifest: manifestPath, Log: slog.New(slog.NewJSONHandler(logs, nil)), Interval: 50 * time.Millisecond, EnclaveLog: logs,
		// The pod's address: the plugin has 127.0.0.1 to itself.
		ListenHost: "127.0.0.2",
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	defer func() { cancel(); <-ran }()
	socket := filepath.Join(dir, "supervisor.sock")
	go func() { _ = s.Serve(ctx, socket) }()
	go func() { _ = s.Run(ctx); close(ran) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, _, _, _ := supervisor.Get(ctx, socket, supervisor.PathReady)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready; log:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.2:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(c)
	_ = c.Close()
	if string(reply) != "plugin got: outside says hi\n" {
		t.Errorf("through the enclave's port and egress: %q; log:\n%s", reply, logs.String())
	}
}
