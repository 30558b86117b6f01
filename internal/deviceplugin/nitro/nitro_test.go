package nitro_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cloister-cc/cloister/internal/deviceplugin/kubelettest"
	nitromode "github.com/cloister-cc/cloister/internal/deviceplugin/nitro"
)

// host is a fake /dev and /sys of a Nitro parent instance.
type host struct{ dev, sys string }

func newHost(t *testing.T, offline string) host {
	h := host{dev: t.TempDir(), sys: t.TempDir()}
	if err := os.WriteFile(filepath.Join(h.dev, "nitro_enclaves"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cpu := filepath.Join(h.sys, "devices/system/cpu")
	if err := os.MkdirAll(cpu, 0o755); err != nil {
		t.Fatal(err)
	}
	h.setOffline(t, offline)
	return h
}

func (h host) setOffline(t *testing.T, list string) {
	if err := os.WriteFile(filepath.Join(h.sys, "devices/system/cpu/offline"), []byte(list+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEnclavesAndOfflineCPUs(t *testing.T) {
	h := newHost(t, "2-3")
	k, _ := kubelettest.Serve(t, &nitromode.Mode{DevRoot: h.dev, SysRoot: h.sys, Enclaves: 4, CPUs: true}, time.Hour)
	k.WaitListed(t, nitromode.ResourceEnclaves, "nitro_enclaves-0:Healthy nitro_enclaves-1:Healthy nitro_enclaves-2:Healthy nitro_enclaves-3:Healthy")
	k.WaitListed(t, nitromode.ResourceCPUs, "cpu-2:Healthy cpu-3:Healthy")

	h.setOffline(t, "2-3,6")
	k.WaitListed(t, nitromode.ResourceCPUs, "cpu-2:Healthy cpu-3:Healthy cpu-6:Healthy")

	ctx := context.Background()
	resp, err := k.Client(nitromode.ResourceEnclaves).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"nitro_enclaves-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	d := resp.ContainerResponses[0].Devices
	if len(d) != 1 || d[0].HostPath != filepath.Join(h.dev, "nitro_enclaves") || d[0].ContainerPath != "/dev/nitro_enclaves" {
		t.Errorf("enclave devices %v", d)
	}
	resp, err = k.Client(nitromode.ResourceCPUs).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"cpu-6", "cpu-2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs[nitromode.EnvCPUs]; got != "2,6" {
		t.Errorf("%s = %q, want 2,6", nitromode.EnvCPUs, got)
	}

	if err := os.Remove(filepath.Join(h.dev, "nitro_enclaves")); err != nil {
		t.Fatal(err)
	}
	k.WaitListed(t, nitromode.ResourceEnclaves, "")
	k.WaitListed(t, nitromode.ResourceCPUs, "")
}

func TestCPUsOnlyWhenAsked(t *testing.T) {
	h := newHost(t, "1")
	k, _ := kubelettest.Serve(t, &nitromode.Mode{DevRoot: h.dev, SysRoot: h.sys, Enclaves: 1}, time.Hour)
	k.WaitListed(t, nitromode.ResourceEnclaves, "nitro_enclaves-0:Healthy")
	for _, r := range k.Registrations() {
		if r.ResourceName == nitromode.ResourceCPUs {
			t.Error("CPU resource registered without --enclave-cpus")
		}
	}
}

func TestEnclavesOutOfRange(t *testing.T) {
	for _, n := range []int{0, 5} {
		if err := (&nitromode.Mode{Enclaves: n}).Validate(); err == nil || !strings.Contains(err.Error(), "--enclaves must be between 1 and 4") {
			t.Errorf("enclaves %d: %v", n, err)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "\n": nil, "3": {3}, "2-4,7": {2, 3, 4, 7}, "0,5-5": {0, 5}} {
		got, err := nitromode.ParseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"a", "4-2", "1-x"} {
		if _, err := nitromode.ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", bad)
		}
	}
}
