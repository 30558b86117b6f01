package ccruntime

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/BurntSushi/toml"
)

// The handler is installed as a containerd drop-in: a file of its own in
// a folder the main configuration imports. Only the imports line of the
// main file is ever edited, and removing the handler is deleting its
// file. containerd's two configuration versions keep the CRI runtimes in
// different plugins; writing a version 2 path into a version 3 file is
// silently ignored by containerd (the bug Contrast's installer had).

// criRuntimePlugin is where each configuration version keeps runtimes.
var criRuntimePlugin = map[int]string{
	2: "io.containerd.grpc.v1.cri",
	3: "io.containerd.cri.v1.runtime",
}

// Handler is a runtime handler of containerd's CRI.
type Handler struct {
	Name string
	// RuntimeType is the shim, e.g. io.containerd.runc.v2.
	RuntimeType string
	// Options of the shim (e.g. ConfigPath of Kata's configuration).
	Options map[string]any
	// PodAnnotations the shim may see: Kata reads the pod's initdata
	// from io.katacontainers.config.hypervisor.cc_init_data.
	PodAnnotations []string
	// PrivilegedWithoutHostDevices keeps the host's devices out of
	// privileged pods, which run in a VM.
	PrivilegedWithoutHostDevices bool
}

// Platform handlers: sim runs runc (insecure, for development); the Kata
// handlers run each pod in a confidential VM and are written for real
// hardware with Kata installed under /opt/kata (untested here).
func PlatformHandler(platform Platform, version string) (Handler, error) {
	name := ClassName(platform, version)
	kata := func(config string) Handler {
		return Handler{Name: name, RuntimeType: "io.containerd.kata.v2",
			Options:                      map[string]any{"ConfigPath": "/opt/kata/share/defaults/kata-containers/" + config},
			PodAnnotations:               []string{"io.katacontainers.*"},
			PrivilegedWithoutHostDevices: true}
	}
	switch platform {
	case Sim:
		return Handler{Name: name, RuntimeType: "io.containerd.runc.v2"}, nil
	case SNP:
		return kata("configuration-qemu-snp.toml"), nil
	case TDX:
		return kata("configuration-qemu-tdx.toml"), nil
	}
	return Handler{}, fmt.Errorf("unknown platform %q: use sim, snp or tdx", platform)
}

// ConfigVersion reads a containerd configuration's version (2 or 3).
func ConfigVersion(config []byte) (int, error) {
	var head struct {
		Version int `toml:"version"`
	}
	if _, err := toml.Decode(string(config), &head); err != nil {
		return 0, fmt.Errorf("containerd configuration: %w", err)
	}
	if _, ok := criRuntimePlugin[head.Version]; !ok {
		return 0, fmt.Errorf("containerd configuration version %d: only versions 2 (containerd 1.x) and 3 (containerd 2.x) are supported", head.Version)
	}
	return head.Version, nil
}

// DropIn is the handler's drop-in file for a configuration version.
func DropIn(version int, h Handler) ([]byte, error) {
	plugin, ok := criRuntimePlugin[version]
	if !ok {
		return nil, fmt.Errorf("containerd configuration version %d is not supported", version)
	}
	runtime := map[string]any{"runtime_type": h.RuntimeType}
	if len(h.Options) > 0 {
		runtime["options"] = h.Options
	}
	if len(h.PodAnnotations) > 0 {
		runtime["pod_annotations"] = h.PodAnnotations
	}
	if h.PrivilegedWithoutHostDevices {
		runtime["privileged_without_host_devices"] = true
	}
	doc := map[string]any{
		"version": version,
		"plugins": map[string]any{plugin: map[string]any{"containerd": map[string]any{"runtimes": map[string]any{h.Name: runtime}}}},
	}
	var b bytes.Buffer
	b.WriteString("# Written by Cloister's node installer: the " + h.Name + " runtime handler.\n")
	if err := toml.NewEncoder(&b).Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// EnsureImport returns config importing glob (e.g. /etc/containerd/
// conf.d/*.toml), and whether it had to add it. Everything else of the
// configuration is kept as decoded; a configuration that already imports
// it is returned byte for byte.
func EnsureImport(config []byte, glob string) ([]byte, bool, error) {
	if _, err := ConfigVersion(config); err != nil {
		return nil, false, err
	}
	var doc map[string]any
	if _, err := toml.Decode(string(config), &doc); err != nil {
		return nil, false, err
	}
	var imports []any
	if raw, ok := doc["imports"]; ok {
		list, ok := raw.([]any)
		if !ok {
			return nil, false, errors.New("containerd configuration: imports is not a list")
		}
		imports = list
	}
	if slices.Contains(imports, any(glob)) {
		return config, false, nil
	}
	doc["imports"] = append(imports, glob)
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(doc); err != nil {
		return nil, false, err
	}
	return b.Bytes(), true, nil
}
