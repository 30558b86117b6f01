package manifest

import (
	"strings"
	"testing"
)

func TestReady(t *testing.T) {
	for _, tc := range []struct {
		name  string
		st    Status
		ready bool
		says  string
	}{
		{"nothing applied", Status{}, false, "no manifest applied"},
		{"running and done", Status{Plugins: []PluginStatus{{Name: "a", State: PluginRunning}, {Name: "b", State: PluginSucceeded}}}, true, "2 plugins"},
		{"one failed for good", Status{Plugins: []PluginStatus{{Name: "a", State: PluginRunning}, {Name: "b", State: PluginFailed, Message: "exited with code 3"}}}, false, "plugin b failed: exited with code 3"},
		{"one restarting", Status{Plugins: []PluginStatus{{Name: "a", State: PluginWaiting, Message: "restarting in 1s"}}}, false, "plugin a is not running: restarting in 1s"},
	} {
		ready, why := tc.st.Ready()
		if ready != tc.ready || !strings.Contains(why, tc.says) {
			t.Errorf("%s: Ready() = %v, %q; want %v, saying %q", tc.name, ready, why, tc.ready, tc.says)
		}
	}
}

// Simulated PCRs follow what the enclave boots with, nothing else.
func TestSimPCRs(t *testing.T) {
	base, _ := FromSpec(spec())
	same, _ := FromSpec(spec())
	same.Plugins[0].Args = []string{"--other"}
	if string(base.SimPCRs()[PCRImage]) != string(same.SimPCRs()[PCRImage]) {
		t.Error("an argument changed the image PCR")
	}
	other, _ := FromSpec(spec())
	other.Plugins[0].Image += "x"
	if string(base.SimPCRs()[PCRApplication]) == string(other.SimPCRs()[PCRApplication]) || len(base.SimPCRs()[PCRImage]) != 48 {
		t.Error("another image kept the application PCR, or the PCRs are not SHA-384")
	}
}

func TestBooted(t *testing.T) {
	code := 1
	for _, tc := range []struct {
		name string
		st   Status
		want bool
	}{
		{"no manifest", Status{}, false},
		{"a plugin not started yet", Status{Manifest: "m", Plugins: []PluginStatus{{Name: "a", State: PluginRunning}, {Name: "b", State: PluginWaiting, Message: MessageStarting}}}, false},
		{"all started once", Status{Manifest: "m", Plugins: []PluginStatus{{Name: "a", State: PluginRunning}, {Name: "b", State: PluginWaiting, ExitCode: &code, Message: "exited; restarting in 1s"}}}, true},
		{"one could not start", Status{Manifest: "m", Plugins: []PluginStatus{{Name: "a", State: PluginFailed, Message: "no command"}}}, true},
	} {
		if got := tc.st.Booted(); got != tc.want {
			t.Errorf("%s: Booted() = %v", tc.name, got)
		}
	}
}

// A plugin whose declared port does not answer keeps the enclave unready,
// naming the port.
func TestReadyNeedsThePortsToAnswer(t *testing.T) {
	st := Status{Manifest: "m", Plugins: []PluginStatus{{Name: "web", State: PluginRunning}}, Ports: []PortStatus{{Plugin: "web", Port: 8080}}}
	if ok, why := st.Ready(); ok || why != "port 8080 of plugin web does not answer" {
		t.Errorf("closed port: %v %q", ok, why)
	}
	st.Ports[0].Open = true
	if ok, _ := st.Ready(); !ok {
		t.Error("open port: not ready")
	}
}
