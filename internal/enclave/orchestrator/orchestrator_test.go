package orchestrator

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

func newOrchestrator(t *testing.T) (*Orchestrator, *testenv.Buffer) {
	t.Helper()
	logs := &testenv.Buffer{}
	o := &Orchestrator{
		Log:         slog.New(slog.NewJSONHandler(logs, nil)),
		Backoff:     Backoff{Initial: 20 * time.Millisecond, Max: 80 * time.Millisecond, Reset: time.Hour},
		StopGrace:   2 * time.Second,
		NewAttester: NewSimAttester,
	}
	t.Cleanup(o.Stop)
	return o, logs
}

func shPlugin(name, script, policy string, env ...manifest.Env) manifest.Plugin {
	return manifest.Plugin{Name: name, Image: "registry.example/" + name + ":1", Command: []string{"/bin/sh", "-c", script},
		Env: env, RestartPolicy: policy}
}

func testManifest(plugins ...manifest.Plugin) *manifest.Manifest {
	return &manifest.Manifest{Version: manifest.Version, Enclave: manifest.Size{CPUs: 2, MemoryMiB: 2048}, Plugins: plugins}
}

func waitPlugin(t *testing.T, o *Orchestrator, name string, cond func(manifest.PluginStatus) bool) manifest.PluginStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, p := range o.Status().Plugins {
			if p.Name == name && cond(p) {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin %s never got there: %+v", name, o.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Each restart policy as the kubelet applies it to containers: Always
// restarts whatever the exit, OnFailure only failures, Never none; a
// plugin kept stopped after a failure makes the enclave unready, naming it.
func TestRestartPolicies(t *testing.T) {
	o, logs := newOrchestrator(t)
	m := testManifest(
		shPlugin("always", "echo hello from always; exit 3", "Always"),
		shPlugin("onfailure-ok", "exit 0", "OnFailure"),
		shPlugin("onfailure-bad", "exit 4", "OnFailure"),
		shPlugin("never", "exit 5", "Never"),
		manifest.Plugin{Name: "nocommand", Image: "registry.example/x:1", RestartPolicy: "Never"},
	)
	if err := o.Apply(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitPlugin(t, o, "always", func(p manifest.PluginStatus) bool { return p.Restarts >= 3 })
	waitPlugin(t, o, "onfailure-bad", func(p manifest.PluginStatus) bool { return p.Restarts >= 2 })
	ok := waitPlugin(t, o, "onfailure-ok", func(p manifest.PluginStatus) bool { return p.State == manifest.PluginSucceeded })
	never := waitPlugin(t, o, "never", func(p manifest.PluginStatus) bool { return p.State == manifest.PluginFailed })
	if ok.Restarts != 0 || never.Restarts != 0 || never.ExitCode == nil || *never.ExitCode != 5 {
		t.Errorf("OnFailure success %+v, Never failure %+v", ok, never)
	}
	nocmd := waitPlugin(t, o, "nocommand", func(p manifest.PluginStatus) bool { return p.State == manifest.PluginFailed })
	if !strings.Contains(nocmd.Message, "no command") {
		t.Errorf("plugin without a command: %+v", nocmd)
	}
	st := o.Status()
	ready, why := st.Ready()
	if ready || !strings.Contains(why, "plugin never failed: exited with code 5") || !strings.Contains(why, "plugin nocommand failed") {
		t.Errorf("Ready() = %v, %q", ready, why)
	}
	// The plugin's output is in the orchestrator's log, named.
	if l := logs.String(); !strings.Contains(l, `"msg":"hello from always","plugin":"always","stream":"stdout"`) ||
		!strings.Contains(l, `"msg":"plugin ended; restarting"`) {
		t.Errorf("log:\n%s", l)
	}
}

// A manifest with the same boot digest is applied in place: only the
// plugin whose configuration changed restarts; a boot change is refused.
func TestApplyInPlace(t *testing.T) {
	o, _ := newOrchestrator(t)
	dir := t.TempDir()
	script := func(name string) string {
		return "echo $$ > " + filepath.Join(dir, name) + ".$MODE; exec sleep 60"
	}
	m := testManifest(shPlugin("a", script("a"), "Always", manifest.Env{Name: "MODE", Value: "one"}),
		shPlugin("b", script("b"), "Always", manifest.Env{Name: "MODE", Value: "one"}))
	if err := o.Apply(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	pidOf := func(file string) string {
		t.Helper()
		for range 500 {
			if b, err := os.ReadFile(filepath.Join(dir, file)); err == nil && len(b) > 0 {
				return strings.TrimSpace(string(b))
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s never written", file)
		return ""
	}
	aPid, bPid := pidOf("a.one"), pidOf("b.one")
	first := o.Status().Manifest

	changed := testManifest(m.Plugins[0], shPlugin("b", script("b"), "Always", manifest.Env{Name: "MODE", Value: "two"}))
	if err := o.Apply(context.Background(), changed); err != nil {
		t.Fatal(err)
	}
	if pidOf("b.two") == bPid {
		t.Error("b was not restarted with its new environment")
	}
	if _, err := os.Stat(filepath.Join(dir, "a.two")); err == nil {
		t.Error("a restarted although its configuration did not change")
	}
	if err := syscallKill0(aPid); err != nil {
		t.Errorf("a's process %s is gone: %v", aPid, err)
	}
	if st := o.Status(); st.Manifest == first || st.Manifest != changed.ManifestDigest() {
		t.Errorf("status reports manifest %s, want %s", st.Manifest, changed.ManifestDigest())
	}

	bigger := testManifest(changed.Plugins...)
	bigger.Enclave.MemoryMiB = 4096
	if err := o.Apply(context.Background(), bigger); !errors.Is(err, ErrNewEnclave) {
		t.Errorf("boot change: %v, want ErrNewEnclave", err)
	}
}

// Over the API: the manifest, the status, and simulated evidence that is
// Nitro-shaped (PCRs from the manifest, the nonce as user data), always
// insecure, and refused by a policy that does not allow simulation.
func TestAPI(t *testing.T) {
	o, _ := newOrchestrator(t)
	srv := httptest.NewServer(o.Handler())
	defer srv.Close()
	m := testManifest(shPlugin("app", "exec sleep 60", "Always"))

	res, err := http.Get(srv.URL + PathEvidence + "?nonce=0102")
	if err != nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("evidence before a manifest: %v %v", res, err)
	}
	_ = res.Body.Close()
	put := func(m *manifest.Manifest) int {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+PathManifest, bytes.NewReader(m.JSON()))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Body.Close(); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode
	}
	if code := put(m); code != http.StatusOK {
		t.Fatalf("PUT manifest: %d", code)
	}
	waitPlugin(t, o, "app", func(p manifest.PluginStatus) bool { return p.State == manifest.PluginRunning })
	other := testManifest(shPlugin("app", "exec sleep 60", "Always"))
	other.Plugins[0].Image = "registry.example/app:2"
	if code := put(other); code != http.StatusConflict {
		t.Errorf("PUT of a manifest needing a new enclave: %d, want 409", code)
	}
	res, err = http.Get(srv.URL + PathEvidence + "?nonce=zz")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("bad nonce: %d", res.StatusCode)
	}

	evidence := func() *attest.Claims {
		t.Helper()
		res, err := http.Get(srv.URL + PathEvidence + "?nonce=c0ffee")
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("evidence: %v %v", res, err)
		}
		defer func() { _ = res.Body.Close() }()
		var raw bytes.Buffer
		_, _ = raw.ReadFrom(res.Body)
		if typ := res.Header.Get(HeaderEvidenceType); typ != string(attest.Sim) {
			t.Errorf("evidence type %q", typ)
		}
		claims, err := sim.Verify(raw.Bytes(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return claims
	}
	claims := evidence()
	want := m.SimPCRs()
	if !claims.Insecure || claims.Nitro == nil || claims.Nonce.String() != "c0ffee" || claims.ReportData.String() != m.ManifestDigest() ||
		!bytes.Equal(claims.Nitro.PCRs[0], want[0]) || !bytes.Equal(claims.Nitro.PCRs[2], want[2]) {
		t.Errorf("claims %+v, want the nonce and the manifest's digest %s", claims, m.ManifestDigest())
	}
	if err := (&attest.Policy{}).Check(claims); attest.CheckOf(err) != attest.CheckSimulation {
		t.Errorf("default policy: %v, want a simulation rejection", err)
	}
	digest, _ := hex.DecodeString(m.ManifestDigest())
	pinned := &attest.Policy{AllowSimulation: true, Nonce: attest.Bytes{0xc0, 0xff, 0xee},
		Identities: []attest.Identity{{Type: attest.Nitro, PCRs: map[int]attest.Bytes{0: want[0]}, Manifest: digest}}}
	if err := pinned.Check(claims); err != nil {
		t.Errorf("a policy pinning the applied manifest: %v", err)
	}

	// The host changes a plugin's command in place: the PCRs stay, the
	// evidence changes, and the pinned policy refuses it.
	changed := testManifest(shPlugin("app", "exec sleep 61", "Always"))
	if changed.BootDigest() != m.BootDigest() {
		t.Fatal("the change needs a new enclave: not the in-place change under test")
	}
	if code := put(changed); code != http.StatusOK {
		t.Fatalf("PUT changed manifest: %d", code)
	}
	claims = evidence()
	if claims.ReportData.String() != changed.ManifestDigest() || !bytes.Equal(claims.Nitro.PCRs[0], want[0]) {
		t.Errorf("after the change: claims %+v, want the changed manifest's digest and the same PCR0", claims)
	}
	if err := pinned.Check(claims); attest.CheckOf(err) != attest.CheckIdentity || !strings.Contains(err.Error(), "the host changed what the enclave runs") {
		t.Errorf("the pinned policy after a host-side change: %v, want an identity rejection", err)
	}
}

func syscallKill0(pid string) error {
	n, err := strconv.Atoi(pid)
	if err != nil {
		return err
	}
	return syscall.Kill(n, 0)
}
