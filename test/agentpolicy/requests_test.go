package agentpolicy

import (
	"strings"
)

// The shapes of the kata agent's requests, as kata's genpolicy test cases
// (src/tools/genpolicy/tests/policy/testdata at podpolicy.KataSource) give
// them: the OCI spec with Go's field names, the rest with protobuf's.

const sandboxID = "257a671dd451a8bf7ea4950d722106db358ef5ded2997c60f7dc1101b31b727a"

type request = map[string]any

// container is what the kubelet and containerd ask the agent to create
// for one container of the pod.
type container struct {
	id, name, image string
	args, env       []string
	cwd             string
	uid, gid        int
	caps            []string
	mounts          []any
	storages        []any
	noNewPrivs      bool
	readonlyRoot    bool
}

var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

func mount(dest, typ, source string, options ...string) map[string]any {
	return map[string]any{"destination": dest, "type_": typ, "source": source, "options": options}
}

// runtimeMounts are the ones every container gets from the runtime.
func runtimeMounts(id string) []any {
	shared := "/run/kata-containers/shared/containers/" + id + "-e9bb691ee0df3258-"
	return []any{
		mount("/proc", "proc", "proc", "nosuid", "noexec", "nodev"),
		mount("/dev", "tmpfs", "tmpfs", "nosuid", "strictatime", "mode=755", "size=65536k"),
		mount("/dev/pts", "devpts", "devpts", "nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"),
		mount("/dev/mqueue", "mqueue", "mqueue", "nosuid", "noexec", "nodev"),
		mount("/sys", "sysfs", "sysfs", "nosuid", "noexec", "nodev", "ro"),
		mount("/sys/fs/cgroup", "cgroup", "cgroup", "nosuid", "noexec", "nodev", "relatime", "ro"),
		mount("/etc/hosts", "bind", shared+"hosts", "rbind", "rprivate", "rw"),
		mount("/dev/termination-log", "bind", shared+"termination-log", "rbind", "rprivate", "rw"),
		mount("/etc/hostname", "bind", shared+"hostname", "rbind", "rprivate", "rw"),
		mount("/etc/resolv.conf", "bind", shared+"resolv.conf", "rbind", "rprivate", "rw"),
		mount("/dev/shm", "bind", "/run/kata-containers/sandbox/shm", "rbind"),
		mount("/var/run/secrets/kubernetes.io/serviceaccount", "bind", shared+"serviceaccount", "rbind", "rprivate", "ro"),
	}
}

func (c container) request() request {
	rootfs := "/run/kata-containers/" + c.id + "/rootfs"
	caps := c.caps
	if caps == nil {
		caps = defaultCaps
	}
	return request{
		"OCI": map[string]any{
			"Annotations": map[string]any{
				"io.katacontainers.pkg.oci.bundle_path":    "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + c.id,
				"io.katacontainers.pkg.oci.container_type": "pod_container",
				"io.kubernetes.cri.container-name":         c.name,
				"io.kubernetes.cri.container-type":         "container",
				"io.kubernetes.cri.image-name":             c.image,
				"io.kubernetes.cri.sandbox-id":             sandboxID,
				"io.kubernetes.cri.sandbox-name":           "web-0",
				"io.kubernetes.cri.sandbox-namespace":      "shop",
			},
			"Hooks":    nil,
			"Hostname": "",
			"Linux": map[string]any{
				"Devices":       []any{},
				"MaskedPaths":   []any{"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"},
				"Namespaces":    []any{map[string]any{"Path": "", "Type": "ipc"}, map[string]any{"Path": "", "Type": "uts"}, map[string]any{"Path": "", "Type": "mount"}},
				"ReadonlyPaths": []any{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
				"Sysctl":        map[string]any{},
			},
			"Mounts": append(runtimeMounts(c.id), c.mounts...),
			"Process": map[string]any{
				"Args": c.args,
				"Capabilities": map[string]any{
					"Ambient": []any{}, "Bounding": caps, "Effective": caps, "Inheritable": []any{}, "Permitted": caps,
				},
				"Cwd":             c.cwd,
				"Env":             c.env,
				"NoNewPrivileges": c.noNewPrivs,
				"Terminal":        false,
				"User":            map[string]any{"UID": c.uid, "GID": c.gid, "AdditionalGids": []any{c.gid}, "Username": ""},
			},
			"Root":    map[string]any{"Path": rootfs, "Readonly": c.readonlyRoot},
			"Version": "1.1.0",
		},
		"container_id":  c.id,
		"exec_id":       c.id,
		"devices":       []any{},
		"sandbox_pidns": false,
		"storages": append([]any{map[string]any{
			"driver": "image_guest_pull", "driver_options": []any{}, "fs_group": nil, "fstype": "overlay",
			"mount_point": rootfs, "options": []any{}, "source": c.image,
		}}, c.storages...),
	}
}

// sandboxRequest creates the pod's sandbox, with its /dev/shm.
func sandboxRequest() request {
	return request{"sandbox_id": sandboxID, "sandbox_pidns": false, "hostname": "web-0", "storages": []any{map[string]any{
		"driver": "ephemeral", "driver_options": []any{}, "source": "shm", "fstype": "tmpfs",
		"options":     []any{"noexec", "nosuid", "nodev", "mode=1777", "size=67108864"},
		"mount_point": "/run/kata-containers/sandbox/shm", "fs_group": nil,
	}}}
}

// storage is one of a container's storages.
func storage(driver, source, fstype, mountPoint string) map[string]any {
	return map[string]any{"driver": driver, "driver_options": []any{}, "source": source, "fstype": fstype,
		"options": []any{}, "mount_point": mountPoint, "fs_group": nil}
}

// pause is the sandbox's own container.
func pause(id string) request {
	r := container{id: id, args: []string{"/pause"}, env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, cwd: "/"}.request()
	ann := r["OCI"].(map[string]any)["Annotations"].(map[string]any)
	ann["io.kubernetes.cri.container-type"] = "sandbox"
	ann["io.katacontainers.pkg.oci.container_type"] = "pod_sandbox"
	delete(ann, "io.kubernetes.cri.container-name")
	delete(ann, "io.kubernetes.cri.image-name")
	r["storages"] = []any{map[string]any{"driver": "image_guest_pull", "source": "pause", "mount_point": "/run/kata-containers/" + id + "/rootfs"}}
	return r
}

// exec is an exec in a container, with the container's environment.
func exec(c container, args ...string) request {
	return request{
		"container_id": c.id, "exec_id": "05e07bbb-d06c-402d-b9b7-e6386935b200", "string_user": nil,
		"process": map[string]any{
			"Terminal": false, "Args": args, "Cwd": "/",
			"Env":  c.env,
			"User": map[string]any{"UID": c.uid, "GID": c.gid},
		},
	}
}

// oci reaches into a request's OCI spec.
func oci(r request) map[string]any { return r["OCI"].(map[string]any) }

// id is the n-th container's id: 64 hex digits, as containerd makes them.
func id(n byte) string { return strings.Repeat(string([]byte{'a' + n%6}), 64) }
