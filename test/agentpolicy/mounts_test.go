package agentpolicy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

// The sandbox's storages: only its /dev/shm in guest memory, as genpolicy
// allows. A share or a block device mounted anywhere in the guest, the
// shared containers folder (where the initializer's secrets are) or a
// volume's folder included, is refused.
func TestSandboxStorages(t *testing.T) {
	with := func(extra map[string]any) request {
		r := sandboxRequest()
		r["storages"] = append(r["storages"].([]any), extra)
		return r
	}
	for name, req := range map[string]request{
		"virtio-fs at the shared containers folder": with(storage("virtio-fs", "kataShared", "virtiofs", "/run/kata-containers/shared/containers")),
		"a block device over an emptyDir's folder":  with(storage("blk", "/dev/vdb", "ext4", "/run/kata-containers/shared/containers/"+sandboxID+"/rootfs/local/data")),
		"a 9p share at the sandbox's folder":        with(storage("9p", "kataShared", "9p", "/run/kata-containers/sandbox")),
		"/dev/shm from the host":                    {"sandbox_id": sandboxID, "storages": []any{storage("virtio-fs", "shm", "tmpfs", "/run/kata-containers/sandbox/shm")}},
		"no sandbox id":                             {"sandbox_pidns": false},
		"a sandbox id that is a path":               {"sandbox_id": "../../x", "sandbox_pidns": false},
	} {
		if newAgent(t, thePod(t).Rego()).ask("CreateSandboxRequest", req) {
			t.Errorf("%s: allowed", name)
		}
	}
	newAgent(t, thePod(t).Rego()).mustAllow("CreateSandboxRequest", sandboxRequest())
}

// Every mount comes from the place of the volume it names; every storage
// makes one of the container's volumes.
func TestMountsAreBoundToTheirVolumes(t *testing.T) {
	shared := "/run/kata-containers/shared/containers/"
	local := shared + sandboxID + "/rootfs/local/"
	withMount := func(dest, typ, source string, options ...string) request {
		r := webRequest()
		var mounts []any
		for _, m := range r.mounts {
			if m.(map[string]any)["destination"] != dest {
				mounts = append(mounts, m)
			}
		}
		r.mounts = append(mounts, mount(dest, typ, source, options...))
		return r.request()
	}
	withStorage := func(c container, s map[string]any) request {
		c.storages = append(c.storages, s)
		return c.request()
	}
	for name, req := range map[string]request{
		// The host fills a folder with CopyFile and binds it over the
		// TLS folder the initializer writes: a forged CA.
		"/cloister from a folder the host copied": withMount("/cloister", "bind", shared+id(2)+"-e9bb691ee0df3258-cloister", "rbind", "ro"),
		"/cloister from another emptyDir":         withMount("/cloister", "bind", "/run/kata-containers/sandbox/ephemeral/data", "rbind", "ro"),
		"/cloister from the guest's disk":         withMount("/cloister", "local", local+"secrets", "rbind", "ro"),
		"/data from another volume's folder":      withMount("/data", "local", local+"secrets", "rbind"),
		"/data from another sandbox's folder":     withMount("/data", "local", shared+id(5)+"/rootfs/local/data", "rbind"),
		"/data from the shared folder itself":     withMount("/data", "bind", shared, "rbind"),
		"/data below its folder":                  withMount("/data", "local", local+"data/sub", "rbind"),
		"/data as a host path":                    withMount("/data", "bind", "/etc", "rbind"),
		"a storage of a volume the container has not": withStorage(logRequest(),
			storage("local", "local", "local", local+"data")),
		"a storage over the shared folder": withStorage(webRequest(), storage("local", "local", "local", shared+"x")),
		"virtio-fs in a container's storages": withStorage(webRequest(),
			storage("virtio-fs", "kataShared", "virtiofs", "/run/kata-containers/sandbox/ephemeral/secrets")),
	} {
		a := started(t)
		if a.ask("CreateContainerRequest", rename(req, id(4))) {
			t.Errorf("%s: allowed", name)
		}
	}
	// Nor can the host copy into an emptyDir's folder before it is made.
	a := started(t)
	for _, p := range []string{local + "data/ca.pem", shared + sandboxID + "/local/secrets/ca.pem", shared + "watchable/x/ca.pem"} {
		if a.ask("CopyFileRequest", request{"path": p, "file_mode": 0o100644}) {
			t.Errorf("CopyFile into %s allowed", p)
		}
	}
}

// rename gives a container request another id, as a second attempt
// would have.
func rename(r request, newID string) request {
	r["container_id"] = newID
	r["exec_id"] = newID
	return r
}

// A ConfigMap's mount and its watched copy are the container's own,
// named after the mount.
func TestSharedVolumes(t *testing.T) {
	spec := &corev1.PodSpec{
		Containers: []corev1.Container{{Name: "web", Image: webImage, Command: []string{"/web"},
			VolumeMounts: []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/web.d", ReadOnly: true}}}},
		Volumes: []corev1.Volume{{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "web"}}}}},
	}
	p, err := podpolicy.Of(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Containers[0].ImageConfig = &podpolicy.ImageConfig{Env: []string{"PATH=/bin"}}
	shared := "/run/kata-containers/shared/containers/"
	web := func(source string, storages ...any) request {
		return container{id: id(2), name: "web", image: webImage, args: []string{"/web"}, env: []string{"PATH=/bin", "HOSTNAME=web-0"}, cwd: "/",
			mounts:   []any{mount("/etc/web.d", "bind", source, "rbind", "rprivate", "ro")},
			storages: storages}.request()
	}
	fresh := func() *agent {
		a := newAgent(t, p.Rego())
		a.mustAllow("CreateSandboxRequest", sandboxRequest())
		return a
	}
	fresh().mustAllow("CreateContainerRequest", web(shared+id(2)+"-0123456789abcdef-web.d"))
	fresh().mustAllow("CreateContainerRequest", web(shared+"watchable/"+id(2)+"-0123456789abcdef-web.d",
		storage("watchable-bind", shared+id(2)+"-0123456789abcdef-web.d", "bind", shared+"watchable/"+id(2)+"-0123456789abcdef-web.d")))
	// An id with pattern syntax in it (a dot) would match other names.
	dotted := rename(web(shared+"webqx-0123456789abcdef-web.d"), "web.x")
	if fresh().ask("CreateContainerRequest", dotted) {
		t.Error("a container id that is a pattern")
	}
	for name, req := range map[string]request{
		"another container's copy":  web(shared + id(3) + "-0123456789abcdef-web.d"),
		"a copy of another mount":   web(shared + id(2) + "-0123456789abcdef-cloister"),
		"a look-alike name":         web(shared + id(2) + "-0123456789abcdef-webxd"),
		"the sandbox's disk":        web(shared + sandboxID + "/rootfs/local/conf"),
		"a watched copy of another": web(shared+"watchable/"+id(2)+"-0123456789abcdef-web.d", storage("watchable-bind", shared+id(3)+"-0123456789abcdef-web.d", "bind", shared+"watchable/"+id(2)+"-0123456789abcdef-web.d")),
		"a watched copy elsewhere":  web(shared+id(2)+"-0123456789abcdef-web.d", storage("watchable-bind", shared+id(2)+"-0123456789abcdef-web.d", "bind", "/run/kata-containers/sandbox/ephemeral/x")),
		"a local storage for it":    web(shared+id(2)+"-0123456789abcdef-web.d", storage("local", "local", "local", shared+sandboxID+"/rootfs/local/conf")),
	} {
		if fresh().ask("CreateContainerRequest", req) {
			t.Errorf("%s: allowed", name)
		}
	}
}
