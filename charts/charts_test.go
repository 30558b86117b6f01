package charts

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// daemonSet renders a chart's DaemonSet with the given values.
func daemonSet(t *testing.T, name string, values map[string]any) *appsv1.DaemonSet {
	t.Helper()
	out, err := Render(name, name+"-x", "ns", values)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal([]byte(out[name+"/templates/daemonset.yaml"]), &ds); err != nil {
		t.Fatal(err)
	}
	return &ds
}

// The host paths the operator is told reach the pods: the device plugins
// see the device folder at its host path (they hand the kubelet host
// paths) and the kubelet's pod-resources where it is; LAS probes the host's
// own enclave device node and, without simulation, reaches the host's AESM
// socket.
func TestHostPaths(t *testing.T) {
	host := map[string]any{"host": map[string]any{"devDir": "/n/dev", "kubeletDir": "/n/kubelet"}}
	for _, name := range []string{"sgxplugin", "cexplugin", "nitroplugin"} {
		ds := daemonSet(t, name, host)
		spec := ds.Spec.Template.Spec
		c := spec.Containers[0]
		if !strings.Contains(strings.Join(c.Args, " "), "--dev-root=/n/dev") {
			t.Errorf("%s args %v", name, c.Args)
		}
		paths := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				paths[v.Name] = v.HostPath.Path
			}
		}
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		if paths["dev"] != "/n/dev" || mounts["dev"] != "/n/dev" || paths["pod-resources"] != "/n/kubelet/pod-resources" ||
			mounts["pod-resources"] != "/var/lib/kubelet/pod-resources" || paths["device-plugins"] != "/var/lib/kubelet/device-plugins" {
			t.Errorf("%s volumes %v mounted at %v", name, paths, mounts)
		}
		// Without the operator's values: a standard node.
		ds = daemonSet(t, name, nil)
		if p := ds.Spec.Template.Spec.Volumes; !strings.Contains(string(mustJSON(t, p)), `"path":"/dev"`) {
			t.Errorf("%s default volumes %s", name, mustJSON(t, p))
		}
	}
	host["host"].(map[string]any)["aesmDir"] = "/n/aesmd"
	ds := daemonSet(t, "las", host)
	c := ds.Spec.Template.Spec.Containers[0]
	paths, types, mounts := map[string]string{}, map[string]string{}, map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			paths[v.Name], types[v.Name] = v.HostPath.Path, string(*v.HostPath.Type)
		}
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("las mount %s is writable", m.Name)
		}
		mounts[m.Name] = m.MountPath
	}
	args := strings.Join(c.Args, " ")
	if len(paths) != 2 || paths["sgx-enclave"] != "/n/dev/sgx_enclave" || types["sgx-enclave"] != "CharDevice" || mounts["sgx-enclave"] != "/host/dev/sgx_enclave" ||
		paths["aesmd"] != "/n/aesmd" || types["aesmd"] != "DirectoryOrCreate" || mounts["aesmd"] != "/run/aesmd" ||
		!strings.Contains(args, "--dev-root=/host/dev") || !strings.Contains(args, "--aesm-socket=/run/aesmd/aesm.socket") {
		t.Errorf("las volumes %v %v, mounts %v, args %v", paths, types, mounts, c.Args)
	}
	// In simulation LAS has no AESM.
	host["simulation"] = true
	ds = daemonSet(t, "las", host)
	if v := mustJSON(t, ds.Spec.Template.Spec); strings.Contains(string(v), "aesm") {
		t.Errorf("simulated LAS mounts AESM: %s", v)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The SGX and Nitro plugins make their sockets in the kubelet's
// root-owned folder: they run as root, but with no capability and no
// privilege escalation.
func TestSGXPluginRunsAsRootWithoutCapabilities(t *testing.T) {
	for _, name := range []string{"sgxplugin", "nitroplugin"} {
		sc := daemonSet(t, name, nil).Spec.Template.Spec.Containers[0].SecurityContext
		if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 ||
			sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: security context %+v", name, sc)
		}
	}
}

// The Nitro plugin runs on x86 and Graviton nodes, offers the enclaves and
// CPUs its CR says, and stays off the nodes where AWS's plugin runs.
func TestNitroPluginStaysOffAWSPluginNodes(t *testing.T) {
	ds := daemonSet(t, "nitroplugin", map[string]any{"enclaves": 2, "enclaveCPUs": true, "excludeNodes": []any{"node-a", "node-b"}})
	spec := ds.Spec.Template.Spec
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 || terms[0].MatchExpressions[0].Key != "kubernetes.io/arch" ||
		terms[0].MatchExpressions[1].Key != "kubernetes.io/hostname" || terms[0].MatchExpressions[1].Operator != corev1.NodeSelectorOpNotIn ||
		!slices.Equal(terms[0].MatchExpressions[1].Values, []string{"node-a", "node-b"}) {
		t.Errorf("affinity %s", mustJSON(t, terms))
	}
	args := strings.Join(spec.Containers[0].Args, " ")
	if !strings.HasPrefix(args, "nitro ") || !strings.Contains(args, "--enclaves=2") || !strings.Contains(args, "--enclave-cpus") {
		t.Errorf("args %s", args)
	}
	if terms := daemonSet(t, "nitroplugin", nil).Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; len(terms[0].MatchExpressions) != 1 {
		t.Errorf("no AWS plugin, yet %s", mustJSON(t, terms))
	}
}

// LAS issues simulated evidence only when its CR asks; only then does it
// read the API (to name the calling pod's policy), with a token and
// nothing but pod lists.
func TestLASSimulationIsExplicit(t *testing.T) {
	for sim, want := range map[bool]bool{false: false, true: true} {
		ds := daemonSet(t, "las", map[string]any{"simulation": sim})
		args := strings.Join(ds.Spec.Template.Spec.Containers[0].Args, " ")
		if strings.Contains(args, "--simulation") != want || strings.Contains(args, "--pod-identity") != want {
			t.Errorf("simulation %v: args %s", sim, args)
		}
		if token := ds.Spec.Template.Spec.AutomountServiceAccountToken; token == nil || *token != want {
			t.Errorf("simulation %v: automountServiceAccountToken %v", sim, token)
		}
		// The simulation key outlives a container restart (the operator
		// reads it once per pod), in memory, writable on a read-only root.
		c := ds.Spec.Template.Spec.Containers[0]
		keyVolume := slices.ContainsFunc(ds.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == "simulation-key" && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory
		}) && slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "simulation-key" && m.MountPath == "/run/las" })
		if strings.Contains(args, "--key-file=/run/las/simulation.key") != want || keyVolume != want {
			t.Errorf("simulation %v: args %s, key volume %v", sim, args, keyVolume)
		}
		out, err := Render("las", "las-x", "ns", map[string]any{"simulation": sim})
		if err != nil {
			t.Fatal(err)
		}
		rbac := out["las/templates/serviceaccount.yaml"]
		if strings.Contains(rbac, "kind: ClusterRole\n") != want || (want && !strings.Contains(rbac, `verbs: ["list", "watch"]`)) {
			t.Errorf("simulation %v: RBAC\n%s", sim, rbac)
		}
	}
}

// The enclave pods: a simulated enclave needs no Nitro host volumes; a
// Nitro one gets its hugepages and nitro-cli's folders; both run without
// capabilities, their probes asking the supervisor.
func TestNitroEnclavePods(t *testing.T) {
	render := func(sim bool) *appsv1.Deployment {
		t.Helper()
		out, err := Render("nitroenclavedeployment", "ned-x", "ns", map[string]any{"simulation": sim, "bootDigest": "abc"})
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(out["nitroenclavedeployment/templates/deployment.yaml"]), &d); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out["nitroenclavedeployment/templates/configmap.yaml"], `"version":"cloister.dev/enclave-manifest/v1"`) {
			t.Errorf("manifest ConfigMap:\n%s", out["nitroenclavedeployment/templates/configmap.yaml"])
		}
		return &d
	}
	volumes := func(d *appsv1.Deployment) string {
		var names []string
		for _, v := range d.Spec.Template.Spec.Volumes {
			names = append(names, v.Name)
		}
		return strings.Join(names, ",")
	}
	for sim, want := range map[bool]string{true: "manifest,run,tmp", false: "manifest,run,tmp,hugepages,nitro-logs,nitro-run"} {
		d := render(sim)
		c := d.Spec.Template.Spec.Containers[0]
		if got := volumes(d); got != want {
			t.Errorf("simulation=%v: volumes %s, want %s", sim, got, want)
		}
		if sc := c.SecurityContext; sc == nil || len(sc.Capabilities.Drop) != 1 || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("simulation=%v: security context %+v", sim, sc)
		}
		if strings.Join(c.ReadinessProbe.Exec.Command, " ") != "/usr/local/bin/cloister-enclave probe ready" ||
			d.Spec.Template.Annotations["enclave.cloister.dev/boot-digest"] != "abc" || d.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() != 0 {
			t.Errorf("simulation=%v: probe %v, annotations %v, strategy %+v", sim, c.ReadinessProbe, d.Spec.Template.Annotations, d.Spec.Strategy)
		}
	}
}
