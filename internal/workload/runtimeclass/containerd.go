package runtimeclass

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
	// LikeDefault makes the handler a copy of the node's default runtime
	// (its shim and options) under the handler's name: runc's cgroup
	// driver and root must match what the kubelet and the node use.
	LikeDefault bool
}

// PlatformHandler is the handler of a platform: sim runs runc (insecure, for development); the Kata
// handlers run each pod in a confidential VM and are written for real
// hardware with Kata installed under /opt/kata (untested here). name is
// the handler's (ClassName).
func PlatformHandler(platform Platform, name string) (Handler, error) {
	kata := func(config string) Handler {
		return Handler{Name: name, RuntimeType: "io.containerd.kata.v2",
			Options:                      map[string]any{"ConfigPath": "/opt/kata/share/defaults/kata-containers/" + config},
			PodAnnotations:               []string{"io.katacontainers.*"},
			PrivilegedWithoutHostDevices: true}
	}
	switch platform {
	case Sim:
		return Handler{Name: name, RuntimeType: "io.containerd.runc.v2", LikeDefault: true}, nil
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

// DefaultSocket is containerd's gRPC address unless its configuration
// says otherwise.
const DefaultSocket = "/run/containerd/containerd.sock"

// configDoc is the part of a containerd configuration the installer reads.
type configDoc struct {
	Version int `toml:"version"`
	GRPC    struct {
		Address string `toml:"address"`
	} `toml:"grpc"`
	Plugins map[string]struct {
		Containerd struct {
			DefaultRuntimeName string                    `toml:"default_runtime_name"`
			Runtimes           map[string]map[string]any `toml:"runtimes"`
		} `toml:"containerd"`
	} `toml:"plugins"`
}

func decodeConfig(config []byte) (configDoc, error) {
	var doc configDoc
	if _, err := toml.Decode(string(config), &doc); err != nil {
		return doc, fmt.Errorf("containerd configuration: %w", err)
	}
	return doc, nil
}

// Socket is the gRPC address a containerd configuration sets.
func Socket(config []byte) (string, error) {
	doc, err := decodeConfig(config)
	if err != nil {
		return "", err
	}
	if doc.GRPC.Address == "" {
		return DefaultSocket, nil
	}
	return doc.GRPC.Address, nil
}

// likeDefault fills h's shim and options from the configuration's default
// runtime (runc when it names none, as containerd does). A default the
// configuration does not describe leaves h as it is.
func likeDefault(config []byte, version int, h Handler) (Handler, error) {
	doc, err := decodeConfig(config)
	if err != nil {
		return h, err
	}
	cri := doc.Plugins[criRuntimePlugin[version]].Containerd
	name := cri.DefaultRuntimeName
	if name == "" {
		name = "runc"
	}
	def, ok := cri.Runtimes[name]
	if !ok {
		return h, nil
	}
	if t, ok := def["runtime_type"].(string); ok && t != "" {
		h.RuntimeType = t
	}
	if opts, ok := def["options"].(map[string]any); ok && len(opts) > 0 {
		h.Options = opts
	}
	return h, nil
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
