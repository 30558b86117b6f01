package agentpolicy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

var (
	setupImage = "registry.example/setup@sha256:" + strings.Repeat("1", 64)
	webImage   = "registry.example/web@sha256:" + strings.Repeat("2", 64)
	logImage   = "registry.example/log@sha256:" + strings.Repeat("3", 64)
)

// thePod has an init container and an app whose images' configurations
// are known, and a sidecar whose image's is not.
func thePod(t testing.TB) *podpolicy.Policy {
	t.Helper()
	spec := &corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsGroup: ptr.To[int64](1000)},
		InitContainers:  []corev1.Container{{Name: "setup", Image: setupImage, Args: []string{"--once"}}},
		Containers: []corev1.Container{{
			Name: "web", Image: webImage, Command: []string{"/web"}, Args: []string{"--port", "8080", "--node=$(NODE_IP)"},
			Env: []corev1.EnvVar{
				{Name: "MODE", Value: "prod"},
				{Name: "NODE_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
				{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "t"}, Key: "t", Optional: ptr.To(true)}}},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "secrets", MountPath: "/cloister", ReadOnly: true}, {Name: "data", MountPath: "/data"}},
			SecurityContext: &corev1.SecurityContext{
				RunAsUser: ptr.To[int64](1000), RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
				ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}},
			},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}}},
		}, {
			Name: "log", Image: logImage, Args: []string{"serve"},
		}},
		Volumes: []corev1.Volume{
			{Name: "secrets", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	p, err := podpolicy.Of(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.InitContainers[0].ImageConfig = &podpolicy.ImageConfig{Entrypoint: []string{"/setup"}, Env: []string{"PATH=/bin"}, User: "65532:65532"}
	p.Containers[0].ImageConfig = &podpolicy.ImageConfig{Entrypoint: []string{"/entry"}, Cmd: []string{"--help"}, Env: []string{"PATH=/usr/bin:/bin"}, WorkingDir: "/srv"}
	return p
}

// The pod's own requests, as the kubelet and containerd make them.
func setupRequest() container {
	return container{id: id(1), name: "setup", image: setupImage, args: []string{"/setup", "--once"},
		env: []string{"PATH=/bin", "HOSTNAME=web-0", "KUBERNETES_SERVICE_HOST=10.96.0.1"}, cwd: "/", uid: 65532, gid: 1000} // the pod's group
}

func webRequest() container {
	return container{
		id: id(2), name: "web", image: webImage, args: []string{"/web", "--port", "8080", "--node=10.0.0.7"},
		env: []string{"PATH=/usr/bin:/bin", "HOSTNAME=web-0", "MODE=prod", "NODE_IP=10.0.0.7",
			"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443", "KUBERNETES_PORT=tcp://10.96.0.1:443",
			"KUBERNETES_PORT_443_TCP_PROTO=tcp"},
		cwd: "/srv", uid: 1000, gid: 1000, caps: []string{"CAP_NET_BIND_SERVICE"}, noNewPrivs: true, readonlyRoot: true,
		mounts: []any{
			mount("/cloister", "bind", "/run/kata-containers/sandbox/ephemeral/secrets", "rbind", "ro"),
			mount("/data", "local", "/run/kata-containers/shared/containers/"+sandboxID+"/rootfs/local/data", "rbind", "rprivate", "rw"),
		},
		storages: []any{
			storage("ephemeral", "tmpfs", "tmpfs", "/run/kata-containers/sandbox/ephemeral/secrets"),
			storage("local", "local", "local", "/run/kata-containers/shared/containers/"+sandboxID+"/rootfs/local/data"),
		},
	}
}

func logRequest() container {
	return container{id: id(3), name: "log", image: logImage, args: []string{"/usr/bin/log", "serve"},
		env: []string{"PATH=/usr/local/bin:/usr/bin", "HOSTNAME=web-0"}, cwd: "/var/log", uid: 0, gid: 1000}
}

// started is an agent that has created the pod's sandbox and containers.
func started(t *testing.T) *agent {
	t.Helper()
	a := newAgent(t, thePod(t).Rego())
	a.mustAllow("CreateSandboxRequest", sandboxRequest())
	a.mustAllow("CreateContainerRequest", pause(sandboxID))
	for _, c := range []container{setupRequest(), webRequest(), logRequest()} {
		a.mustAllow("CreateContainerRequest", c.request())
		a.mustAllow("StartContainerRequest", request{"container_id": c.id})
	}
	return a
}

func TestThePodsOwnRequestsAreAllowed(t *testing.T) {
	a := started(t)
	for _, kind := range []string{"WaitProcessRequest", "StatsContainerRequest", "SignalProcessRequest", "ReadStreamRequest",
		"RemoveContainerRequest", "TtyWinResizeRequest", "UpdateInterfaceRequest", "UpdateRoutesRequest", "GetOOMEventRequest",
		"OnlineCPUMemRequest", "DestroySandboxRequest", "GuestDetailsRequest"} {
		a.mustAllow(kind, request{"container_id": id(2)})
	}
	// The liveness probe, in its container.
	a.mustAllow("ExecProcessRequest", exec(webRequest(), "cat", "/tmp/healthy"))
	a.mustAllow("CopyFileRequest", request{"path": "/run/kata-containers/shared/containers/" + id(2) + "-e9bb691ee0df3258-resolv.conf"})
	a.mustAllow("CopyFileRequest", request{"path": "/run/kata-containers/shared/containers/" + id(2) + "-bbb1a5bd88623ac4-serviceaccount/..2026_11_27/token"})
}

func TestTheHostCannotChangeWhatRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func() request
	}{
		{"another image", func() request {
			c := webRequest()
			c.image = strings.Replace(webImage, "2222", "6666", 1)
			return c.request()
		}},
		{"another image in the guest's pull only", func() request {
			r := webRequest().request()
			r["storages"].([]any)[0].(map[string]any)["source"] = strings.Replace(webImage, "2222", "6666", 1)
			return r
		}},
		{"an image by tag", func() request { c := webRequest(); c.image = "registry.example/web:latest"; return c.request() }},
		{"a changed command", func() request { c := webRequest(); c.args[0] = "/bin/sh"; return c.request() }},
		{"a changed argument", func() request { c := webRequest(); c.args[2] = "9090"; return c.request() }},
		{"an extra argument", func() request { c := webRequest(); c.args = append(c.args, "--debug"); return c.request() }},
		{"the image's arguments instead of the pod's", func() request { c := setupRequest(); c.args = []string{"/setup", "--help"}; return c.request() }},
		{"another entrypoint", func() request { c := setupRequest(); c.args[0] = "/bin/sh"; return c.request() }},
		{"a changed env value", func() request { c := webRequest(); c.env[2] = "MODE=debug"; return c.request() }},
		{"an env value twice", func() request { c := webRequest(); c.env = append(c.env, "MODE=debug"); return c.request() }},
		{"an env the pod sets, missing", func() request { c := webRequest(); c.env = slices.Delete(c.env, 2, 3); return c.request() }},
		{"LD_PRELOAD", func() request { c := webRequest(); c.env = append(c.env, "LD_PRELOAD=/tmp/x.so"); return c.request() }},
		{"a service variable with a shell in it", func() request {
			c := webRequest()
			c.env = append(c.env, "DB_SERVICE_HOST=$(sh)")
			return c.request()
		}},
		{"PATH of another image", func() request { c := setupRequest(); c.env[0] = "PATH=/tmp"; return c.request() }},
		{"another folder", func() request { c := webRequest(); c.cwd = "/tmp"; return c.request() }},
		{"root", func() request { c := webRequest(); c.uid = 0; return c.request() }},
		{"another group", func() request { c := webRequest(); c.gid = 0; return c.request() }},
		{"the image's user changed", func() request { c := setupRequest(); c.uid = 0; return c.request() }},
		{"privileges", func() request {
			c := webRequest()
			c.caps = append(slices.Clone(defaultCaps), "CAP_SYS_ADMIN")
			return c.request()
		}},
		{"privilege escalation", func() request { c := webRequest(); c.noNewPrivs = false; return c.request() }},
		{"a writable root", func() request { c := webRequest(); c.readonlyRoot = false; return c.request() }},
		{"a host folder mounted", func() request {
			c := webRequest()
			c.mounts = append(c.mounts, mount("/host", "bind", "/", "rbind"))
			return c.request()
		}},
		{"a volume mounted writable", func() request {
			c := webRequest()
			c.mounts[0] = mount("/cloister", "bind", "/run/kata-containers/sandbox/ephemeral/secrets", "rbind", "rw")
			return c.request()
		}},
		{"a volume missing", func() request { c := webRequest(); c.mounts = c.mounts[:1]; return c.request() }},
		{"a volume mounted as another file system", func() request {
			c := webRequest()
			c.mounts[1] = mount("/data", "sysfs", "/run/kata-containers/sandbox/ephemeral/data", "rw")
			return c.request()
		}},
		{"a volume from outside the sandbox", func() request {
			c := webRequest()
			c.mounts[1] = mount("/data", "bind", "/run/kata-containers/shared/containers/../../../etc", "rbind")
			return c.request()
		}},
		{"a device", func() request {
			r := webRequest().request()
			oci(r)["Linux"].(map[string]any)["Devices"] = []any{map[string]any{"Path": "/dev/sda", "Type": "b"}}
			return r
		}},
		{"a hook", func() request {
			r := webRequest().request()
			oci(r)["Hooks"] = map[string]any{"Prestart": []any{map[string]any{"Path": "/bin/sh"}}}
			return r
		}},
		{"another process's namespace", func() request {
			r := webRequest().request()
			oci(r)["Linux"].(map[string]any)["Namespaces"] = []any{map[string]any{"Path": "/proc/1/ns/pid", "Type": "pid"}}
			return r
		}},
		{"no mount namespace", func() request {
			r := webRequest().request()
			oci(r)["Linux"].(map[string]any)["Namespaces"] = []any{map[string]any{"Path": "", "Type": "ipc"}, map[string]any{"Path": "", "Type": "uts"}}
			return r
		}},
		{"the guest's network namespace joined", func() request {
			r := webRequest().request()
			l := oci(r)["Linux"].(map[string]any)
			l["Namespaces"] = append(l["Namespaces"].([]any), map[string]any{"Path": "/proc/1/ns/net", "Type": "network"})
			return r
		}},
		{"/proc/kcore unmasked", func() request {
			r := webRequest().request()
			oci(r)["Linux"].(map[string]any)["MaskedPaths"] = []any{"/proc/keys"}
			return r
		}},
		{"a sysctl", func() request {
			r := webRequest().request()
			oci(r)["Linux"].(map[string]any)["Sysctl"] = map[string]any{"kernel.core_pattern": "|/tmp/x"}
			return r
		}},
		{"a container not in the policy", func() request { c := webRequest(); c.name = "spy"; return c.request() }},
		{"a container id that is a path", func() request { c := webRequest(); c.id = "../sandbox"; return c.request() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAgent(t, thePod(t).Rego())
			a.mustAllow("CreateSandboxRequest", sandboxRequest())
			if a.ask("CreateContainerRequest", tc.change()) {
				t.Error("allowed")
			}
			// The unchanged request passes the same agent.
			a.mustAllow("CreateContainerRequest", webRequest().request())
		})
	}
}

func TestOnlyTheListedExecs(t *testing.T) {
	a := started(t)
	for _, tc := range []struct {
		name string
		req  request
	}{
		{"a shell", exec(webRequest(), "sh")},
		{"the probe with another argument", exec(webRequest(), "cat", "/etc/shadow")},
		{"the probe in another container", exec(logRequest(), "cat", "/tmp/healthy")},
		{"a container never created", exec(container{id: id(5)}, "cat", "/tmp/healthy")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if a.ask("ExecProcessRequest", tc.req) {
				t.Error("allowed")
			}
		})
	}
	withPreload := exec(webRequest(), "cat", "/tmp/healthy")
	withPreload["process"].(map[string]any)["Env"] = []string{"LD_PRELOAD=/tmp/x.so"}
	if a.ask("ExecProcessRequest", withPreload) {
		t.Error("the probe with LD_PRELOAD allowed")
	}
}

func TestRequestsNeverAllowed(t *testing.T) {
	a := started(t)
	for _, tc := range []struct {
		kind string
		req  request
	}{
		{"SetPolicyRequest", request{"policy": "package agent_policy\ndefault ExecProcessRequest := true\n"}},
		{"CreateSandboxRequest", sandboxRequest()},         // a second one
		{"CreateContainerRequest", webRequest().request()}, // the same id again
		{"WriteStreamRequest", request{"container_id": id(2), "data": "cm0gLXJmIC8K"}},
		{"PullImageRequest", request{"image": "evil"}},
		{"SetGuestDateTimeRequest", request{"Sec": 0}},
		{"StartTracingRequest", request{}},
		{"CopyFileRequest", request{"path": "/etc/passwd"}},
		{"CopyFileRequest", request{"path": "/run/kata-containers/shared/containers/" + id(2) + "/../../../../etc/passwd"}},
		{"NoSuchRequest", request{}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			if a.ask(tc.kind, tc.req) {
				t.Error("allowed")
			}
		})
	}
	fresh := newAgent(t, thePod(t).Rego())
	for name, req := range map[string]request{
		"a shared process namespace": {"sandbox_pidns": true},
		"kernel modules":             {"sandbox_pidns": false, "kernel_modules": []any{map[string]any{"name": "evil.ko"}}},
		"guest hooks":                {"sandbox_pidns": false, "guest_hook_path": "/attacker"},
	} {
		if fresh.ask("CreateSandboxRequest", req) {
			t.Errorf("a sandbox with %s allowed", name)
		}
	}
	if fresh.ask("CreateContainerRequest", webRequest().request()) {
		t.Error("a container before its sandbox allowed")
	}
}

// An exec the pod's annotation allows passes, exactly as written.
func TestAnExecTheAnnotationAllows(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: webImage, Command: []string{"/web"}}}}
	p, err := podpolicy.Of(spec, map[string]string{podpolicy.AllowExecAnnotation: `{"web": [["date", "-u"]]}`})
	if err != nil {
		t.Fatal(err)
	}
	p.Containers[0].ImageConfig = &podpolicy.ImageConfig{Env: []string{"PATH=/bin"}}
	a := newAgent(t, p.Rego())
	a.mustAllow("CreateSandboxRequest", sandboxRequest())
	web := container{id: id(2), name: "web", image: webImage, args: []string{"/web"}, env: []string{"PATH=/bin", "HOSTNAME=web-0"}, cwd: "/"}
	a.mustAllow("CreateContainerRequest", web.request())
	a.mustAllow("ExecProcessRequest", exec(web, "date", "-u"))
	if a.ask("ExecProcessRequest", exec(web, "date")) || a.ask("ExecProcessRequest", exec(web, "date", "-u", "-R")) {
		t.Error("an exec other than the one allowed passed")
	}
}

// What the host controls beside the command line: the exec's user and
// privileges, the pause container's environment, links among the
// copied files.
func TestTheHostsOtherLevers(t *testing.T) {
	a := started(t)
	asRoot := exec(webRequest(), "cat", "/tmp/healthy")
	asRoot["process"].(map[string]any)["User"] = map[string]any{"UID": 0, "GID": 0}
	if a.ask("ExecProcessRequest", asRoot) {
		t.Error("the probe as root allowed")
	}
	privileged := exec(webRequest(), "cat", "/tmp/healthy")
	privileged["process"].(map[string]any)["Capabilities"] = map[string]any{"Bounding": []string{"CAP_SYS_ADMIN"}}
	if a.ask("ExecProcessRequest", privileged) {
		t.Error("the probe with CAP_SYS_ADMIN allowed")
	}
	noUser := exec(webRequest(), "cat", "/tmp/healthy")
	delete(noUser["process"].(map[string]any), "User")
	a.mustAllow("ExecProcessRequest", noUser)
	shared := "/run/kata-containers/shared/containers/" + id(2) + "-e9bb691ee0df3258-"
	if a.ask("CopyFileRequest", request{"path": shared + "hosts", "file_mode": 0o120777}) {
		t.Error("a symbolic link copied")
	}
	if a.ask("CopyFileRequest", request{"path": shared + "serviceaccount/su", "file_mode": 0o104755, "uid": 0}) {
		t.Error("a setuid file copied")
	}
	a.mustAllow("CopyFileRequest", request{"path": shared + "serviceaccount/token", "file_mode": 0o100644})
	fresh := newAgent(t, thePod(t).Rego())
	fresh.mustAllow("CreateSandboxRequest", sandboxRequest())
	p := pause(sandboxID)
	oci(p)["Process"].(map[string]any)["Env"] = []string{"PATH=/bin", "LD_PRELOAD=/etc/hosts"}
	if fresh.ask("CreateContainerRequest", p) {
		t.Error("the pause container with LD_PRELOAD allowed")
	}
}

// The guest-evidence initializer runs privileged and has the guest's
// TEE device; an unprivileged container has no device, and GPUs reach
// a pod only with the VM's CDI devices in its policy.
func TestDevices(t *testing.T) {
	privileged := true
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Image: setupImage, Command: []string{"/init"}, SecurityContext: &corev1.SecurityContext{Privileged: &privileged}}},
		Containers:     []corev1.Container{{Name: "web", Image: webImage, Command: []string{"/web"}}},
	}
	withDevice := func(c container, path string) request {
		r := c.request()
		oci(r)["Linux"].(map[string]any)["Devices"] = []any{map[string]any{"Path": path, "Type": "c"}}
		return r
	}
	init := container{id: id(1), name: "init", image: setupImage, args: []string{"/init"}, env: []string{"HOSTNAME=web-0"}, cwd: "/", caps: append(slices.Clone(defaultCaps), "CAP_SYS_ADMIN")}
	web := container{id: id(2), name: "web", image: webImage, args: []string{"/web"}, env: []string{"HOSTNAME=web-0"}, cwd: "/"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		req         request
		allowed     bool
	}{
		{"the privileged initializer's TEE device", nil, withDevice(init, "/dev/sev-guest"), true},
		{"an unprivileged container's TEE device", nil, withDevice(web, "/dev/sev-guest"), false},
		{"a GPU without the VM's devices", nil, withDevice(web, "/dev/nvidia0"), false},
		{"a GPU with the VM's devices", map[string]string{"cdi.k8s.io/gpu": "nvidia.com/pgpu=0"}, withDevice(web, "/dev/nvidia0"), true},
		{"a disk with the VM's devices", map[string]string{"cdi.k8s.io/gpu": "nvidia.com/pgpu=0"}, withDevice(web, "/dev/vda"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := podpolicy.Of(spec, tc.annotations)
			if err != nil {
				t.Fatal(err)
			}
			a := newAgent(t, p.Rego())
			a.mustAllow("CreateSandboxRequest", sandboxRequest())
			if got := a.ask("CreateContainerRequest", tc.req); got != tc.allowed {
				t.Errorf("allowed %v, want %v", got, tc.allowed)
			}
		})
	}
}

// A process namespace of its own is the container's; a second mount
// namespace entry, or one joined by path, is not.
func TestNamespaceEntries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		extra   map[string]any
		allowed bool
	}{
		{"a pid namespace of its own", map[string]any{"Path": "", "Type": "pid"}, true},
		{"the mount namespace twice", map[string]any{"Path": "", "Type": "mount"}, false},
		{"a pid namespace joined", map[string]any{"Path": "/proc/1/ns/pid", "Type": "pid"}, false},
		{"a user namespace", map[string]any{"Path": "", "Type": "user"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAgent(t, thePod(t).Rego())
			a.mustAllow("CreateSandboxRequest", sandboxRequest())
			r := webRequest().request()
			l := oci(r)["Linux"].(map[string]any)
			l["Namespaces"] = append(l["Namespaces"].([]any), tc.extra)
			if got := a.ask("CreateContainerRequest", r); got != tc.allowed {
				t.Errorf("allowed %v, want %v", got, tc.allowed)
			}
		})
	}
}

// A container with envFrom (a ConfigMap the host supplies) takes any other
// variable from it, but none that runs code in, or intercepts the traffic
// of, the programs that read it: each listed one is denied, an ordinary
// one allowed.
func TestEnvFromRefusesHooks(t *testing.T) {
	p := thePod(t)
	p.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	with := func(e string) request {
		c := webRequest()
		c.env = append(slices.Clone(c.env), e)
		return c.request()
	}
	sandbox := func() *agent {
		a := newAgent(t, p.Rego())
		a.mustAllow("CreateSandboxRequest", sandboxRequest())
		return a
	}
	for _, e := range []string{
		"LD_PRELOAD=/data/x.so", "GLIBC_TUNABLES=glibc.malloc.check=3", "JAVA_TOOL_OPTIONS=-javaagent:/data/a.jar",
		"_JAVA_OPTIONS=-javaagent:/data/a.jar", "JDK_JAVA_OPTIONS=-javaagent:/data/a.jar", "CLASSPATH=/data",
		"DOTNET_STARTUP_HOOKS=/data/h.dll", "CORECLR_PROFILER={x}", "CORECLR_ENABLE_PROFILING=1", "COMPlus_EnableDiagnostics=1",
		"NODE_OPTIONS=--require=/data/x.js", "NODE_PATH=/data", "NODE_EXTRA_CA_CERTS=/data/ca.pem", "NODE_TLS_REJECT_UNAUTHORIZED=0",
		"PYTHONPATH=/data", "PYTHONSTARTUP=/data/x.py", "PERL5LIB=/data", "PERLLIB=/data", "RUBYOPT=-r/data/x", "RUBYLIB=/data",
		"BASH_ENV=/data/x.sh", "ENV=/data/x.sh", "HTTPS_PROXY=http://10.0.0.9:3128", "https_proxy=http://10.0.0.9:3128", "ALL_PROXY=socks5://x",
		"SSL_CERT_FILE=/data/ca.pem", "SSL_CERT_DIR=/data", "OPENSSL_CONF=/data/o.cnf", "REQUESTS_CA_BUNDLE=/data/ca.pem", "SSLKEYLOGFILE=/data/k",
		"GODEBUG=x509ignoreCN=1", "GOTRACEBACK=crash",
	} {
		if sandbox().ask("CreateContainerRequest", with(e)) {
			t.Errorf("%s through envFrom allowed", e)
		}
	}
	sandbox().mustAllow("CreateContainerRequest", with("FEATURE_FLAGS=fast"))
}
