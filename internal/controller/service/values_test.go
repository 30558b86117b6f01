package service

import (
	"strings"
	"testing"
)

func TestHostPaths(t *testing.T) {
	got := HostPaths{DevDir: "/n/dev"}.Values()
	if got["devDir"] != "/n/dev" || got["kubeletDir"] != "/var/lib/kubelet" {
		t.Errorf("values %v", got)
	}
	if err := DefaultHostPaths.Validate(); err != nil {
		t.Error(err)
	}
	for _, h := range []HostPaths{{DevDir: "dev"}, {KubeletDir: "/var/lib/kubelet/"}, {DevDir: "/a/../dev"}} {
		if err := h.Validate(); err == nil || !strings.Contains(err.Error(), "absolute, clean path") {
			t.Errorf("%+v: %v", h, err)
		}
	}
}
