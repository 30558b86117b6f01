package agent_policy

# The rules are fixed; policy_data, below them, is the pod's. Every request
# the kata agent receives is denied unless a rule here allows it.

import future.keywords.every
import future.keywords.if
import future.keywords.in

default AddARPNeighborsRequest := true
default AddSwapRequest := false
default CloseStdinRequest := false
default CopyFileRequest := false
default CreateContainerRequest := {"allowed": false}
default CreateSandboxRequest := {"allowed": false}
default DestroySandboxRequest := true
default ExecProcessRequest := false
default GetMetricsRequest := true
default GetOOMEventRequest := true
default GuestDetailsRequest := true
default ListInterfacesRequest := true
default ListRoutesRequest := true
default MemHotplugByProbeRequest := true
default OnlineCPUMemRequest := true
default PauseContainerRequest := true
default PullImageRequest := false
default ReadStreamRequest := true
default RemoveContainerRequest := true
default RemoveStaleVirtiofsShareMountsRequest := true
default ReseedRandomDevRequest := false
default ResumeContainerRequest := true
default SetGuestDateTimeRequest := false
default SetPolicyRequest := false
default SignalProcessRequest := true
default StartContainerRequest := true
default StartTracingRequest := false
default StatsContainerRequest := true
default StopTracingRequest := false
default TtyWinResizeRequest := true
default UpdateContainerRequest := true
default UpdateEphemeralMountsRequest := false
default UpdateInterfaceRequest := true
default UpdateRoutesRequest := true
default WaitProcessRequest := true
default WriteStreamRequest := false

# The sandbox, once: its id remembered (its emptyDir volumes live in its
# folder), its process namespace as the pod shares it, no kernel modules,
# no guest hooks (host-chosen code), and no storage but its /dev/shm in
# guest memory: a virtio-fs share or a block device mounted anywhere in
# the guest, the shared containers folder included, is refused.
CreateSandboxRequest := {"allowed": true, "ops": [
	{"op": "add", "path": "/pstate/sandbox", "value": true},
	{"op": "add", "path": "/pstate/sandbox_id", "value": input.sandbox_id},
	{"op": "add", "path": "/pstate/containers", "value": {}},
]} if {
	not data.pstate.sandbox
	regex.match(`^[a-z0-9]{64}$`, input.sandbox_id)
	object.get(input, "sandbox_pidns", false) == policy_data.share_process_namespace
	count(object.get(input, "kernel_modules", [])) == 0
	object.get(input, "guest_hook_path", "") == ""
	every s in arr(object.get(input, "storages", [])) {
		sandbox_storage(s)
	}
}

sandbox_storage(s) if {
	s.driver == "ephemeral"
	s.source == "shm"
	s.fstype == "tmpfs"
	s.mount_point == "/run/kata-containers/sandbox/shm"
}

# A container is remembered by its id, so that exec can name it.
CreateContainerRequest := {"allowed": true, "ops": [{
	"op": "add",
	"path": concat("/", ["", "pstate", "containers", input.container_id]),
	"value": object.get(input.OCI.Annotations, "io.kubernetes.cri.container-name", ""),
}]} if {
	data.pstate.sandbox
	regex.match(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`, input.container_id)
	not data.pstate.containers[input.container_id]
	allow_create(input)
}

# The pause container of the sandbox.
allow_create(req) if {
	req.OCI.Annotations["io.kubernetes.cri.container-type"] == "sandbox"
	req.OCI.Annotations["io.katacontainers.pkg.oci.container_type"] == "pod_sandbox"
	req.OCI.Process.Args == ["/pause"]
	every e in arr(req.OCI.Process.Env) {
		regex.match(`^PATH=[A-Za-z0-9/:._-]*$`, e)
	}
	no_hooks(req.OCI)
	count(arr(object.get(req, "devices", []))) == 0
	count(arr(req.OCI.Linux.Devices)) == 0
	every m in arr(req.OCI.Mounts) {
		runtime_mount(m)
	}
	every s in arr(object.get(req, "storages", [])) {
		s.driver == "image_guest_pull"
		s.source == "pause"
	}
}

# A container of the policy, by its name.
allow_create(req) if {
	req.OCI.Annotations["io.kubernetes.cri.container-type"] == "container"
	req.OCI.Annotations["io.katacontainers.pkg.oci.container_type"] == "pod_container"
	some c in policy_data.containers
	c.name == req.OCI.Annotations["io.kubernetes.cri.container-name"]
	image_allowed(c, req)
	process_allowed(c, req.OCI.Process)
	req.OCI.Root.Readonly == c.readonly_root
	no_hooks(req.OCI)
	linux_allowed(c, req.OCI.Linux)
	devices_allowed(c, req)
	every m in arr(req.OCI.Mounts) {
		mount_allowed(c, req, m)
	}
	every want in c.mounts {
		some m in arr(req.OCI.Mounts)
		m.destination == want.path
	}
	every s in arr(object.get(req, "storages", [])) {
		storage_allowed(c, req, s)
	}
}

# An exec only of a command the pod lists (its exec probes and hooks), in
# the container that lists it, with the container's environment.
ExecProcessRequest if {
	name := data.pstate.containers[input.container_id]
	some c in policy_data.containers
	c.name == name
	some cmd in c.exec
	input.process.Args == cmd
	env_entries_allowed(c, arr(input.process.Env))
	exec_user_allowed(c, object.get(input.process, "User", null))
	caps_allowed(c, object.get(input.process, "Capabilities", null))
}

# An exec runs as the container's user, or as the runtime's default
# for it (no user given).
exec_user_allowed(_, u) if u == null

exec_user_allowed(c, u) if user_allowed(c, u)

# The runtime copies the pod's small files (hosts, resolv.conf, the
# service account token, ConfigMaps and Secrets) into its shared folder,
# and nowhere else.
CopyFileRequest if {
	# Files and folders; never a symbolic link, which a mount of the
	# shared file would follow out of the shared folder.
	bits.and(object.get(input, "file_mode", 0), 61440) != 40960
	# Nor setuid or setgid: a program the host copies in would run as its
	# owner in the container.
	bits.and(object.get(input, "file_mode", 0), 3072) == 0
	# Only into a container's copies (kata's CONTAINER-RANDOM-NAME), never
	# into the sandbox's folder, where its emptyDir volumes live.
	regex.match(`^/run/kata-containers/shared/containers/[a-z0-9]{64}-[a-z0-9]{16}-[A-Za-z0-9_.][A-Za-z0-9_.-]*(/[A-Za-z0-9_.][A-Za-z0-9_.-]*)*$`, input.path)
	not regex.match(`(^|/)\.\.?(/|$)`, input.path)
}

arr(x) := x if {
	is_array(x)
} else := []

no_hooks(oci) if {
	hooks := object.get(oci, "Hooks", null)
	hooks == null
}

no_hooks(oci) if {
	hooks := object.get(oci, "Hooks", null)
	is_object(hooks)
	every _, list in hooks {
		count(arr(list)) == 0
	}
}

######################################################################
# The image: pulled in the guest, by the digest the policy names.

image_allowed(c, req) if {
	image_digest(req.OCI.Annotations["io.kubernetes.cri.image-name"]) == c.digest
	some s in arr(object.get(req, "storages", []))
	s.driver == "image_guest_pull"
	image_digest(s.source) == c.digest
	s.mount_point == req.OCI.Root.Path
}

image_digest(ref) := d if {
	parts := split(ref, "@")
	count(parts) == 2
	parts[0] != ""
	regex.match(`^sha256:[0-9a-f]{64}$`, parts[1])
	d := parts[1]
}

storage_allowed(c, _, s) if {
	s.driver == "image_guest_pull"
	image_digest(s.source) == c.digest
}

# The storage of one of the container's emptyDir volumes, on the guest's
# disk or in its memory, where the volume's mounts come from.
storage_allowed(c, _, s) if {
	s.driver == "local"
	s.source == "local"
	some want in c.mounts
	want.kind == "local"
	s.mount_point in local_folders(want.volume)
}

storage_allowed(c, _, s) if {
	s.driver == "ephemeral"
	s.source == "tmpfs"
	s.fstype == "tmpfs"
	some want in c.mounts
	want.kind == "memory"
	s.mount_point == concat("", [memory_folder, want.volume])
}

# The runtime's watched copy of one of the container's ConfigMaps or
# Secrets.
storage_allowed(c, req, s) if {
	s.driver == "watchable-bind"
	some want in c.mounts
	want.kind == "shared"
	regex.match(shared_copy(req, "", want), s.source)
	regex.match(shared_copy(req, "watchable/", want), s.mount_point)
}

local_folders(volume) := {
	concat("", [shared_folder, data.pstate.sandbox_id, "/rootfs/local/", volume]),
	concat("", [shared_folder, data.pstate.sandbox_id, "/local/", volume]),
}

memory_folder := "/run/kata-containers/sandbox/ephemeral/"

shared_folder := "/run/kata-containers/shared/containers/"

# The id goes into a pattern: only containerd's (64 hex digits), which
# holds no pattern syntax.
shared_copy(req, sub, want) := concat("", [`^/run/kata-containers/shared/containers/`, sub, req.container_id, `-[a-z0-9]{16}-`, want.base_re, `$`]) if {
	regex.match(`^[a-z0-9]{64}$`, req.container_id)
}

######################################################################
# The process: its arguments, folder, environment, user and privileges.

process_allowed(c, p) if {
	args_allowed(c, arr(p.Args))
	cwd_allowed(c, p.Cwd)
	env_allowed(c, arr(p.Env))
	user_allowed(c, p.User)
	caps_allowed(c, object.get(p, "Capabilities", null))
	no_new_privs_allowed(c, object.get(p, "NoNewPrivileges", false))
}

args_allowed(c, args) if {
	not c.args_any_prefix
	count(args) == count(c.args)
	every i, re in c.args {
		regex.match(re, args[i])
	}
}

# The image's entrypoint was not known when the policy was made: the
# pod's arguments end the command line.
args_allowed(c, args) if {
	c.args_any_prefix
	n := count(args) - count(c.args)
	n >= 0
	every i, re in c.args {
		regex.match(re, args[n + i])
	}
}

cwd_allowed(c, _) if c.cwd == ""

cwd_allowed(c, cwd) if cwd == c.cwd

# Every variable is one the pod or its image sets, or one the platform
# adds (the host name, Kubernetes services); each name once; every
# variable the pod sets is there.
env_allowed(c, env) if {
	env_entries_allowed(c, env)
	every re in c.env_required {
		some e in env
		regex.match(re, e)
	}
}

env_entries_allowed(c, env) if {
	names := [name | some e in env; name := env_name(e)]
	count(names) == count(env)
	count(names) == count({n | some n in names})
	every e in env {
		env_entry_allowed(c, e)
	}
}

env_name(e) := n if {
	parts := split(e, "=")
	count(parts) > 1
	n := parts[0]
	regex.match(`^[A-Za-z_][A-Za-z0-9_.-]*$`, n)
}

env_entry_allowed(c, e) if {
	some re in c.env
	regex.match(re, e)
}

env_entry_allowed(c, e) if {
	e in c.image_env
	not env_name(e) in c.env_names
}

env_entry_allowed(c, e) if {
	c.image_env_unknown
	env_name(e) == "PATH"
	not "PATH" in c.env_names
}

env_entry_allowed(c, e) if {
	some re in platform_env
	regex.match(re, e)
	not env_name(e) in c.env_names
}

env_entry_allowed(c, e) if {
	c.env_from
	not env_name(e) in c.env_names
	not regex.match(env_from_denied, e)
}

# What a host-fed envFrom (a ConfigMap or Secret it supplies) may not set:
# a name there runs code in, or intercepts the traffic of, a program that
# reads it. By prefix: the dynamic loader's (ld.so(8)), glibc's malloc,
# .NET's startup hooks and profilers (DOTNET_, CORECLR_, COMPlus_), Node's
# TLS switches, Python's, Perl's, RubyGems', Lua's and OpenSSL's own
# variables, git's TLS switches. By name: glibc's iconv, tunables, locale
# and resolver files; Java's agent and option variables (the JDK's
# java(1)); Node's options, module path and extra CAs; Perl's, Ruby's,
# PHP's, Tcl's and R's library paths and options; the shells' startup
# file and tracing; the proxies curl and Go's net/http take from the
# environment; the trust stores of OpenSSL, curl and Python's requests and
# TLS key logging; Go's runtime switches.
env_from_denied := concat("", [
	`^((LD_|MALLOC_|DOTNET_|CORECLR_|COMPlus_|NODE_TLS_|PYTHON|PERL5|GEM_|LUA_|OPENSSL_|GIT_SSL_)[A-Za-z0-9_.-]*|`,
	`GCONV_PATH|GLIBC_TUNABLES|LOCPATH|NLSPATH|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN|`,
	`JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|JDK_JAVA_OPTIONS|JAVA_OPTS|CLASSPATH|`,
	`NODE_OPTIONS|NODE_PATH|NODE_EXTRA_CA_CERTS|`,
	`PERLLIB|PERLIO|RUBYOPT|RUBYLIB|PHPRC|PHP_INI_SCAN_DIR|TCLLIBPATH|R_LIBS|R_PROFILE|`,
	`BASH_ENV|ENV|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|IFS|`,
	`HTTP_PROXY|HTTPS_PROXY|FTP_PROXY|ALL_PROXY|NO_PROXY|http_proxy|https_proxy|ftp_proxy|all_proxy|no_proxy|`,
	`SSL_CERT_FILE|SSL_CERT_DIR|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|SSLKEYLOGFILE|`,
	`GODEBUG|GOTRACEBACK|GOFLAGS)=`,
])

platform_env := [
	`^HOSTNAME=[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`,
	`^[A-Z_][A-Z0-9_]*_SERVICE_HOST=[0-9a-fA-F.:]{2,45}$`,
	`^[A-Z_][A-Z0-9_]*_SERVICE_PORT(_[A-Z0-9_]+)?=[0-9]{1,5}$`,
	`^[A-Z_][A-Z0-9_]*_PORT=(tcp|udp|sctp)://\[?[0-9a-fA-F.:]{2,45}\]?:[0-9]{1,5}$`,
	`^[A-Z_][A-Z0-9_]*_PORT_[0-9]{1,5}_(TCP|UDP|SCTP)=(tcp|udp|sctp)://\[?[0-9a-fA-F.:]{2,45}\]?:[0-9]{1,5}$`,
	`^[A-Z_][A-Z0-9_]*_PORT_[0-9]{1,5}_(TCP|UDP|SCTP)_PROTO=(tcp|udp|sctp)$`,
	`^[A-Z_][A-Z0-9_]*_PORT_[0-9]{1,5}_(TCP|UDP|SCTP)_PORT=[0-9]{1,5}$`,
	`^[A-Z_][A-Z0-9_]*_PORT_[0-9]{1,5}_(TCP|UDP|SCTP)_ADDR=[0-9a-fA-F.:]{2,45}$`,
]

user_allowed(c, u) if {
	c.uid in {-1, u.UID}
	c.gid in {-1, u.GID}
	non_root_allowed(c, u)
}

non_root_allowed(c, _) if not c.run_as_non_root

non_root_allowed(c, u) if {
	c.run_as_non_root
	u.UID != 0
}

caps_allowed(c, _) if c.privileged

caps_allowed(c, caps) if {
	not c.privileged
	caps == null
}

caps_allowed(c, caps) if {
	not c.privileged
	is_object(caps)
	every _, list in caps {
		every cap in arr(list) {
			cap in c.capabilities
		}
	}
}

no_new_privs_allowed(c, _) if not c.no_new_privileges

no_new_privs_allowed(c, nnp) if {
	c.no_new_privileges
	nnp == true
}

######################################################################
# Linux: no devices, no namespaces joined or left out, the kernel's masks
# kept, the pod's sysctls only.

linux_allowed(c, l) if {
	namespaces_allowed(arr(l.Namespaces))
	masks_allowed(c, l)
	sysctls_allowed(object.get(l, "Sysctl", null))
}

sysctls_allowed(s) if s == policy_data.sysctls

sysctls_allowed(s) if {
	s in [null, {}]
	count(policy_data.sysctls) == 0
}

# Each container's own mount, IPC and UTS namespaces (and PID or cgroup
# ones, if asked), joining none: a container without a mount namespace
# would see the whole guest. (The agent puts it into the sandbox's network
# namespace, and its process namespace as the pod shares it.)
namespaces_allowed(nss) if {
	every t in ["ipc", "uts", "mount"] {
		some ns in nss
		ns.Type == t
	}
	every ns in nss {
		ns.Path == ""
		ns.Type in {"ipc", "uts", "mount", "pid", "cgroup"}
	}
	count(nss) == count({ns.Type | some ns in nss})
}

masks_allowed(c, _) if c.privileged

masks_allowed(c, l) if {
	not c.privileged
	every p in masked_paths {
		p in arr(l.MaskedPaths)
	}
	every p in readonly_paths {
		p in arr(l.ReadonlyPaths)
	}
}

masked_paths := ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"]

readonly_paths := ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]

devices_allowed(_, req) if {
	count(arr(object.get(req, "devices", []))) == 0
	count(arr(req.OCI.Linux.Devices)) == 0
}

# A privileged container has the guest's devices (the initializer its TEE
# device): privileged inside the VM reaches the guest's, never the host's.
devices_allowed(c, _) if c.privileged

# Devices passed into the VM (CDI: GPUs) reach the pod's containers.
devices_allowed(_, req) if {
	policy_data.vm_devices
	every d in arr(req.OCI.Linux.Devices) {
		regex.match(`^/dev/(vfio/([0-9]+|vfio)|nvidia[a-z0-9-]*)$`, d.Path)
	}
}

######################################################################
# Mounts: the runtime's own, and the pod's volumes where the pod mounts
# them.

mount_allowed(_, _, m) if runtime_mount(m)

mount_allowed(c, req, m) if {
	some want in c.mounts
	m.destination == want.path
	readonly_allowed(want, arr(m.options))
	volume_source(req, want, m)
}

# Each mount's source is the place of the volume it names: an emptyDir
# from the sandbox's folder of that volume (never a folder the host
# filled), a shared volume from the container's own copy named after the
# mount.
volume_source(_, want, m) if {
	want.kind == "local"
	m.type_ in {"bind", "local"}
	some folder in local_folders(want.volume)
	m.source == concat("", [folder, want.sub_path])
}

volume_source(_, want, m) if {
	want.kind == "memory"
	m.type_ == "bind"
	m.source == concat("", [memory_folder, want.volume, want.sub_path])
}

volume_source(req, want, m) if {
	want.kind == "shared"
	m.type_ == "bind"
	some sub in ["", "watchable/"]
	regex.match(shared_copy(req, sub, want), m.source)
}

readonly_allowed(want, _) if not want.read_only

readonly_allowed(want, options) if {
	want.read_only
	"ro" in options
}

runtime_mount(m) if {
	some want in runtime_mounts
	m.destination == want.destination
	m.type_ == want.type
	m.source == want.source
}

runtime_mount(m) if {
	some name, dest in shared_files
	m.destination == dest
	m.type_ == "bind"
	regex.match(concat("", [`^/run/kata-containers/shared/containers/[A-Za-z0-9]+-[0-9a-f]{16}-`, name, `$`]), m.source)
}

runtime_mount(m) if {
	m.destination == "/var/run/secrets/kubernetes.io/serviceaccount"
	m.type_ == "bind"
	regex.match(`^/run/kata-containers/shared/containers/[A-Za-z0-9]+-[0-9a-f]{16}-serviceaccount$`, m.source)
	"ro" in arr(m.options)
}

runtime_mounts := [
	{"destination": "/proc", "type": "proc", "source": "proc"},
	{"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
	{"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
	{"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue"},
	{"destination": "/sys", "type": "sysfs", "source": "sysfs"},
	{"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
	{"destination": "/dev/shm", "type": "bind", "source": "/run/kata-containers/sandbox/shm"},
]

shared_files := {
	"hosts": "/etc/hosts",
	"hostname": "/etc/hostname",
	`resolv\.conf`: "/etc/resolv.conf",
	"termination-log": "/dev/termination-log",
}
