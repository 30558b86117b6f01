package service

import (
	"strings"
	"testing"
)

func TestHostPaths(t *testing.T) {
	got := HostPaths{DevDir: "/n/dev"}.Values()
	if got["devDir"] != "/n/dev" || got["kubeletDir"] != "/var/lib/kubelet" || got["aesmDir"] != "/var/run/aesmd" || got["sysDir"] != "/sys" {
		t.Errorf("values %v", got)
	}
	if err := DefaultHostPaths.Validate(); err != nil {
		t.Error(err)
	}
	for _, h := range []HostPaths{{DevDir: "dev"}, {KubeletDir: "/var/lib/kubelet/"}, {DevDir: "/a/../dev"}, {AESMDir: "run/aesmd"}, {SysDir: "/sys/"}} {
		if err := h.Validate(); err == nil || !strings.Contains(err.Error(), "absolute, clean path") {
			t.Errorf("%+v: %v", h, err)
		}
	}
}

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/cloister-cc/cloister-las:v0.1.0":                   "v0.1.0",
		"localhost:5000/las":                                        "latest",
		"ghcr.io/cloister-cc/cloister-las@sha256:0123456789abcdef0": "0123456789ab",
		"ghcr.io/x/las:1.2@sha256:abc":                              "abc",
	} {
		if got := ImageTag(image); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", image, got, want)
		}
	}
}
