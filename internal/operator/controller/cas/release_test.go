package cas

import (
	"bytes"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/witness"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// casCR is a CAS as the API server stores it after defaulting.
func casCR(edit func(*servicesv1beta1.CAS)) *servicesv1beta1.CAS {
	size := resource.MustParse("1Gi")
	c := &servicesv1beta1.CAS{ObjectMeta: metav1.ObjectMeta{Name: "cas", Namespace: "team"},
		Spec: servicesv1beta1.CASSpec{
			Service:     servicesv1beta1.CASService{Type: corev1.ServiceTypeClusterIP, ClientPort: 8081, EnclavePort: 18765},
			Persistence: servicesv1beta1.CASPersistence{MountPath: "/etc/cas/db", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, Size: &size},
		}}
	if edit != nil {
		edit(c)
	}
	return c
}

// render is the CAS release of c: its Service and StatefulSet.
func render(t *testing.T, c *servicesv1beta1.CAS) (*corev1.Service, *appsv1.StatefulSet) {
	t.Helper()
	out := renderFiles(t, c)
	var svc corev1.Service
	var ss appsv1.StatefulSet
	if err := yaml.UnmarshalStrict([]byte(out["cas/templates/service.yaml"]), &svc); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(out["cas/templates/statefulset.yaml"]), &ss); err != nil {
		t.Fatal(err)
	}
	return &svc, &ss
}

// renderFiles is the CAS release of c, by template file.
func renderFiles(t *testing.T, c *servicesv1beta1.CAS) map[string]string {
	t.Helper()
	ch, err := charts.Load("cas")
	if err != nil {
		t.Fatal(err)
	}
	k := &Kind{Base: service.Base{ChartData: ch, DefaultImage: "example.com/cas@sha256:" + strings.Repeat("a", 64)}}
	ns, values, err := k.Release(c, "cloister-system")
	if err != nil {
		t.Fatal(err)
	}
	if ns != c.Namespace {
		t.Errorf("release namespace %q, want the CR's %q", ns, c.Namespace)
	}
	out, err := charts.Render("cas", "cas-"+c.Name, ns, values)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// networkPolicy is the rendered NetworkPolicy of c, nil without one.
func networkPolicy(t *testing.T, c *servicesv1beta1.CAS) *networkingv1.NetworkPolicy {
	t.Helper()
	doc := strings.TrimSpace(renderFiles(t, c)["cas/templates/networkpolicy.yaml"])
	if doc == "" {
		return nil
	}
	var np networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict([]byte(doc), &np); err != nil {
		t.Fatal(err)
	}
	return &np
}

// The NetworkPolicy admits the operator, CAS's namespace and the peers
// the CR names, on CAS's port; any source only for an exposed Service.
// The dev cluster's network plugin enforces none, so its rendering is
// what is tested.
func TestNetworkPolicy(t *testing.T) {
	if np := networkPolicy(t, casCR(nil)); np != nil {
		t.Fatalf("a NetworkPolicy without spec.networkPolicy.enabled: %+v", np)
	}
	team := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}}
	np := networkPolicy(t, casCR(func(c *servicesv1beta1.CAS) {
		c.Spec.NetworkPolicy = servicesv1beta1.CASNetworkPolicy{Enabled: true, From: []networkingv1.NetworkPolicyPeer{team}}
	}))
	if np == nil || np.Namespace != "team" || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != "cloister-cas" ||
		np.Spec.PodSelector.MatchLabels["app.kubernetes.io/instance"] != "cas-cas" ||
		len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Fatalf("policy %+v", np)
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("a ClusterIP CAS admits any source: %+v", np.Spec.Ingress)
	}
	rule := np.Spec.Ingress[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port.String() != "https" || len(rule.From) != 3 {
		t.Fatalf("rule %+v", rule)
	}
	op := rule.From[0]
	if op.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "cloister-system" || op.PodSelector.MatchLabels["app.kubernetes.io/name"] != "cloister-operator" {
		t.Errorf("the operator peer %+v", op)
	}
	if own := rule.From[1]; own.PodSelector == nil || len(own.PodSelector.MatchLabels) != 0 || own.NamespaceSelector != nil {
		t.Errorf("the own-namespace peer %+v", own)
	}
	if rule.From[2].NamespaceSelector.MatchLabels["team"] != "web" {
		t.Errorf("the named peer %+v", rule.From[2])
	}
	for _, typ := range []corev1.ServiceType{corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort} {
		np = networkPolicy(t, casCR(func(c *servicesv1beta1.CAS) {
			c.Spec.Service.Type = typ
			c.Spec.NetworkPolicy.Enabled = true
		}))
		if len(np.Spec.Ingress) != 2 || len(np.Spec.Ingress[1].From) != 2 || np.Spec.Ingress[1].From[0].IPBlock.CIDR != "0.0.0.0/0" ||
			np.Spec.Ingress[1].From[1].IPBlock.CIDR != "::/0" || np.Spec.Ingress[1].Ports[0].Port.String() != "https" {
			t.Errorf("%s: an exposed CAS admits any source on its port: %+v", typ, np.Spec.Ingress)
		}
	}
}

func TestServiceHonoursTheSpec(t *testing.T) {
	svc, _ := render(t, casCR(nil))
	if svc.Name != "cas" || svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 2 ||
		svc.Spec.Ports[0].Port != 8081 || svc.Spec.Ports[1].Port != 18765 || svc.Spec.Ports[0].NodePort != 0 {
		t.Errorf("default Service: %+v", svc.Spec)
	}
	svc, _ = render(t, casCR(func(c *servicesv1beta1.CAS) {
		c.Spec.Service = servicesv1beta1.CASService{Type: corev1.ServiceTypeNodePort, ClientPort: 9000, EnclavePort: 9001,
			NodePorts: &servicesv1beta1.CASNodePorts{ClientPort: 30081, EnclavePort: 30765}}
	}))
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].Port != 9000 || svc.Spec.Ports[0].NodePort != 30081 ||
		svc.Spec.Ports[1].Port != 9001 || svc.Spec.Ports[1].NodePort != 30765 {
		t.Errorf("NodePort Service: %+v", svc.Spec)
	}
	svc, ss := render(t, casCR(func(c *servicesv1beta1.CAS) {
		c.Spec.Service = servicesv1beta1.CASService{Type: corev1.ServiceTypeLoadBalancer, ClientPort: 8081, EnclavePort: 18765,
			LoadBalancerIP: "192.0.2.10", Annotations: map[string]string{"lb.example.com/internal": "true"}}
	}))
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerIP != "192.0.2.10" || svc.Annotations["lb.example.com/internal"] != "true" {
		t.Errorf("LoadBalancer Service: %+v %v", svc.Spec, svc.Annotations)
	}
	if args := strings.Join(ss.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--tls-san=cas,cas.team,cas.team.svc,cas.team.svc.cluster.local,192.0.2.10") {
		t.Errorf("CAS's certificate does not name the Service and the load balancer: %s", args)
	}
}

// CAS reads its init token from the Secret the operator makes, mounted
// read-only for its group alone.
func TestInitTokenMounted(t *testing.T) {
	_, ss := render(t, casCR(nil))
	vol := ss.Spec.Template.Spec.Volumes[0]
	if vol.Secret == nil || vol.Secret.SecretName != conn.InitTokenSecret("cas") || vol.Secret.DefaultMode == nil || *vol.Secret.DefaultMode != 0o440 {
		t.Errorf("init token volume %+v", vol)
	}
	c := ss.Spec.Template.Spec.Containers[0]
	if args := strings.Join(c.Args, " "); !strings.Contains(args, "--init-token-file=/run/cloister/init-token/"+conn.InitTokenKey) {
		t.Errorf("args %s", args)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == vol.Name && (!m.ReadOnly || m.MountPath != "/run/cloister/init-token") {
			t.Errorf("mount %+v", m)
		}
	}
}

func TestPersistence(t *testing.T) {
	_, ss := render(t, casCR(nil))
	if len(ss.Spec.VolumeClaimTemplates) != 0 || len(ss.Spec.Template.Spec.Volumes) != 2 || ss.Spec.Template.Spec.Volumes[1].EmptyDir == nil {
		t.Errorf("without persistence: claims %v, volumes %+v", ss.Spec.VolumeClaimTemplates, ss.Spec.Template.Spec.Volumes)
	}
	dash := "-"
	_, ss = render(t, casCR(func(c *servicesv1beta1.CAS) {
		c.Spec.Persistence.Enabled = true
		c.Spec.Persistence.MountPath = "/data"
		c.Spec.Persistence.StorageClass = &dash
		size := resource.MustParse("5Gi")
		c.Spec.Persistence.Size = &size
	}))
	if len(ss.Spec.VolumeClaimTemplates) != 1 || len(ss.Spec.Template.Spec.Volumes) != 1 {
		t.Fatalf("with persistence: claims %v, volumes %+v", ss.Spec.VolumeClaimTemplates, ss.Spec.Template.Spec.Volumes)
	}
	claim := ss.Spec.VolumeClaimTemplates[0]
	if claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName != "" || claim.Spec.Resources.Requests.Storage().String() != "5Gi" ||
		claim.Spec.AccessModes[0] != corev1.ReadWriteOnce {
		t.Errorf("claim %+v: storageClass \"-\" must disable dynamic provisioning", claim.Spec)
	}
	if ss.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("the database claim is not retained: %+v", ss.Spec.PersistentVolumeClaimRetentionPolicy)
	}
	c := ss.Spec.Template.Spec.Containers[0]
	if c.VolumeMounts[0].MountPath != "/data" || !strings.Contains(strings.Join(c.Args, " "), "--state-dir=/data") {
		t.Errorf("state not on the volume: %v %v", c.VolumeMounts, c.Args)
	}
	gold := "gold"
	_, ss = render(t, casCR(func(c *servicesv1beta1.CAS) {
		c.Spec.Persistence.Enabled = true
		c.Spec.Persistence.StorageClass = &gold
	}))
	if sc := ss.Spec.VolumeClaimTemplates[0].Spec.StorageClassName; sc == nil || *sc != "gold" {
		t.Errorf("storageClass gold: %v", sc)
	}
}

// Simulation is explicit: without it CAS asks for an SGX enclave and
// does not run --simulation.
func TestSimulationIsExplicit(t *testing.T) {
	_, ss := render(t, casCR(nil))
	c := ss.Spec.Template.Spec.Containers[0]
	if strings.Contains(strings.Join(c.Args, " "), "--simulation") || c.Resources.Limits.Name(tee.SGXEnclave, resource.DecimalSI).Value() != 1 {
		t.Errorf("without simulation: args %v, limits %v", c.Args, c.Resources.Limits)
	}
	_, ss = render(t, casCR(func(c *servicesv1beta1.CAS) { c.Spec.Simulation = true }))
	c = ss.Spec.Template.Spec.Containers[0]
	if !strings.Contains(strings.Join(c.Args, " "), "--simulation") || !c.Resources.Limits.Name(tee.SGXEnclave, resource.DecimalSI).IsZero() {
		t.Errorf("with simulation: args %v, limits %v", c.Args, c.Resources.Limits)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("CAS container not hardened: %+v", sc)
	}
}

// A CAS in a confidential VM runs with the platform's runtime class, makes
// its own evidence (--tee), asks for no SGX device, reaches the guest's TEE
// device, seals its seed to no node (the firmware's key would not tell its
// VM from another of the class), and carries its own pod policy (initdata,
// added after the chart), whose digest the status publishes and clients
// pin beside the launch measurement.
func TestConfidentialVM(t *testing.T) {
	measurement := strings.Repeat("ab", 48)
	for _, platform := range []string{"snp", "tdx"} {
		cr := casCR(func(c *servicesv1beta1.CAS) {
			c.Spec.ConfidentialVM = &servicesv1beta1.CASConfidentialVM{Platform: platform, RuntimeClassName: "cloister-cc-" + platform + "-abc", Measurement: measurement}
			if platform == "tdx" {
				c.Spec.ConfidentialVM.RTMRs = []string{measurement, measurement, measurement}
			}
		})
		_, ss := render(t, cr)
		pod := ss.Spec.Template.Spec
		c := pod.Containers[0]
		args := strings.Join(c.Args, " ")
		if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "cloister-cc-"+platform+"-abc" || !strings.Contains(args, "--tee") ||
			!strings.Contains(args, "--sealer=none") || strings.Contains(args, "--simulation") || !c.Resources.Limits.Name(tee.SGXEnclave, resource.DecimalSI).IsZero() ||
			c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged || len(c.Env) != 0 ||
			len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/cloister-cas" {
			t.Errorf("%s: runtime class %v, command %v, args %s, env %v, limits %v, security %+v", platform, pod.RuntimeClassName, c.Command, args, c.Env, c.Resources.Limits, c.SecurityContext)
		}

		// Its pod policy, after the chart: the initdata on the template
		// is the policy of that template, and its digest is what the
		// status publishes and clients pin.
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ss)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetKind("StatefulSet")
		k := &Kind{}
		if err := k.PostRender(cr, nil, u); err != nil {
			t.Fatal(err)
		}
		value, _, _ := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", podpolicy.Annotation)
		got, digest, err := podpolicy.FromAnnotation(value)
		if err != nil {
			t.Fatalf("%s: the initdata: %v", platform, err)
		}
		want, err := podpolicy.Of(&pod, ss.Spec.Template.Annotations)
		if err != nil || !bytes.Equal(got.Canonical(), want.Canonical()) {
			t.Errorf("%s: the initdata's policy is not the pod's: %v", platform, err)
		}
		if len(got.Containers) != 1 || got.Containers[0].SecurityContext == nil || !*got.Containers[0].SecurityContext.Privileged || len(got.InitContainers) != 0 {
			t.Errorf("%s: privilege in the pod policy: %+v", platform, got.Containers)
		}
		if hd := hostData([]service.Owned{{Desired: u}}); hd != digest {
			t.Errorf("%s: status.hostData %q, want the initdata's digest %q", platform, hd, digest)
		}
		cr.Status.HostData = digest
		e := conn.Expect(cr)
		id := e.Policy.Identities
		if len(id) != 1 || e.Policy.AllowSimulation || string(id[0].Type) != platform ||
			(platform == "snp" && (len(id[0].Measurement) != 48 || hex.EncodeToString(id[0].HostData) != digest)) ||
			(platform == "tdx" && (len(id[0].MRTD) != 48 || !strings.HasPrefix(hex.EncodeToString(id[0].MRCONFIGID), digest) || len(id[0].RTMR) != 3)) {
			t.Errorf("%s: clients expect %+v", platform, e.Policy)
		}
		// Without an image pinned by digest there is no pod policy.
		tagged := cr.DeepCopy()
		tagged.Spec.Image = "example.com/cas:v1"
		_, tss := render(t, tagged)
		tobj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(tss)
		tu := &unstructured.Unstructured{Object: tobj}
		tu.SetKind("StatefulSet")
		if err := k.PostRender(tagged, nil, tu); err == nil || !strings.Contains(err.Error(), "pinned by digest") {
			t.Errorf("%s: a tagged image: %v", platform, err)
		}
	}
	// Sealing: only simulation seals to its node; a VM and None do not.
	for _, edit := range []func(*servicesv1beta1.CAS){
		func(c *servicesv1beta1.CAS) {
			c.Spec.ConfidentialVM = &servicesv1beta1.CASConfidentialVM{Platform: "snp", RuntimeClassName: "x", Measurement: measurement}
		},
		func(c *servicesv1beta1.CAS) { c.Spec.Simulation = true },
	} {
		for sealing, want := range map[servicesv1beta1.CASSealing]string{"": "--sealer=s", servicesv1beta1.CASSealingNone: "--sealer=none"} {
			cr := casCR(func(c *servicesv1beta1.CAS) { edit(c); c.Spec.Sealing = sealing })
			if cr.Spec.ConfidentialVM != nil {
				want = "--sealer=none"
			}
			_, ss := render(t, cr)
			c := ss.Spec.Template.Spec.Containers[0]
			args := strings.Join(c.Args, " ")
			if !strings.Contains(args, want) || (want != "--sealer=none" && (len(c.Env) == 0 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName")) {
				t.Errorf("sealing %q: args %s, env %+v", sealing, args, c.Env)
			}
		}
	}
	// A measurement the CRD would refuse pins no CAS at all, never every one.
	bad := casCR(func(c *servicesv1beta1.CAS) {
		c.Spec.ConfidentialVM = &servicesv1beta1.CASConfidentialVM{Platform: "snp", RuntimeClassName: "x", Measurement: "zz"}
	})
	if id := conn.Expect(bad).Policy.Identities; len(id) != 1 || len(id[0].Measurement) == 0 {
		t.Errorf("a bad measurement: %+v", id)
	}
}

// spec.collateral reaches CAS as its flags, the DCAP API key's Secret as a
// read-only file; without it CAS fetches nothing.
func TestCollateral(t *testing.T) {
	_, ss := render(t, casCR(nil))
	if args := strings.Join(ss.Spec.Template.Spec.Containers[0].Args, " "); strings.Contains(args, "--pcs") || strings.Contains(args, "--kds") {
		t.Errorf("no spec.collateral, yet %s", args)
	}
	_, ss = render(t, casCR(func(c *servicesv1beta1.CAS) {
		c.Spec.Collateral = &servicesv1beta1.CASCollateral{PCS: "https://api.trustedservices.intel.com", KDS: "https://kdsintf.amd.com", DCAPAPIKeySecret: "cloister-dcap-api"} //nolint:gosec // a Secret's name
	}))
	pod := ss.Spec.Template.Spec
	args := strings.Join(pod.Containers[0].Args, " ")
	for _, want := range []string{"--pcs=https://api.trustedservices.intel.com", "--kds=https://kdsintf.amd.com", "--dcap-api-file=/run/cloister/dcap-api/dcap-api-key"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %s: want %s", args, want)
		}
	}
	var mounted, volume bool
	for _, m := range pod.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == "dcap-api" && m.ReadOnly && m.MountPath == "/run/cloister/dcap-api")
	}
	for _, v := range pod.Volumes {
		volume = volume || (v.Name == "dcap-api" && v.Secret != nil && v.Secret.SecretName == "cloister-dcap-api")
	}
	if !mounted || !volume {
		t.Errorf("the key's Secret: mounted %v, volume %v", mounted, volume)
	}
}

// A CAS with replicas has a disruption budget of one replica, and rolls
// out one replica at a time; a single CAS has no budget, which would
// block every drain of its node.
func TestDisruptionBudgetAndRollout(t *testing.T) {
	single := renderFiles(t, casCR(nil))
	if doc := strings.TrimSpace(single["cas/templates/poddisruptionbudget.yaml"]); doc != "" {
		t.Errorf("a single CAS has a disruption budget:\n%s", doc)
	}
	c := casCR(func(c *servicesv1beta1.CAS) { c.Spec.Replicas = 3 })
	out := renderFiles(t, c)
	var pdb policyv1.PodDisruptionBudget
	if err := yaml.UnmarshalStrict([]byte(out["cas/templates/poddisruptionbudget.yaml"]), &pdb); err != nil {
		t.Fatal(err)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("budget %+v, want maxUnavailable 1", pdb.Spec)
	}
	if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
		t.Errorf("a replica that is not ready blocks the drain: %v", p)
	}
	_, ss := render(t, c)
	if got := pdb.Spec.Selector.MatchLabels; !maps.Equal(got, ss.Spec.Selector.MatchLabels) {
		t.Errorf("budget selects %v, the StatefulSet %v", got, ss.Spec.Selector.MatchLabels)
	}
	if u := ss.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateStatefulSetStrategyType || u.RollingUpdate == nil ||
		u.RollingUpdate.MaxUnavailable != nil || u.RollingUpdate.Partition == nil || *u.RollingUpdate.Partition != 0 {
		t.Errorf("update strategy %+v, want a rolling update of one replica at a time", u)
	}
}

// spec.backup makes a CronJob that runs CAS's image as `backup` under a
// service account that may only read CAS's state, as a restricted pod
// whose labels are not a replica's, writing into the owners' claim.
func TestScheduledBackup(t *testing.T) {
	if doc := strings.TrimSpace(renderFiles(t, casCR(nil))["cas/templates/backup.yaml"]); doc != "" {
		t.Fatalf("a backup without spec.backup:\n%s", doc)
	}
	c := casCR(func(c *servicesv1beta1.CAS) {
		c.Spec.Backup = &servicesv1beta1.CASBackup{Schedule: "0 3 * * *", ClaimName: "cas-backups", Keep: 5}
	})
	docs := strings.Split(renderFiles(t, c)["cas/templates/backup.yaml"], "\n---\n")
	if len(docs) != 3 {
		t.Fatalf("%d objects, want a ServiceAccount, a RoleBinding and a CronJob", len(docs))
	}
	var rb rbacv1.RoleBinding
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &rb); err != nil {
		t.Fatal(err)
	}
	if rb.RoleRef.Name != "cloister-cas-backup" || len(rb.Subjects) != 1 || rb.Subjects[0].Name != "cas-cas-backup" {
		t.Errorf("role binding %+v", rb)
	}
	var cj batchv1.CronJob
	if err := yaml.UnmarshalStrict([]byte(docs[2]), &cj); err != nil {
		t.Fatal(err)
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	ctr := pod.Containers[0]
	_, ss := render(t, c)
	if cj.Spec.Schedule != "0 3 * * *" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || pod.ServiceAccountName != "cas-cas-backup" ||
		ctr.Image != ss.Spec.Template.Spec.Containers[0].Image ||
		!slices.Equal(ctr.Args, []string{"backup", "--store=kubernetes:team/cas", "--dir=/backup", "--keep=5"}) ||
		pod.Volumes[0].PersistentVolumeClaim == nil || pod.Volumes[0].PersistentVolumeClaim.ClaimName != "cas-backups" {
		t.Errorf("CronJob %+v", cj.Spec)
	}
	if sc := ctr.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 {
		t.Errorf("backup container security %+v", sc)
	}
	sel := labels.SelectorFromSet(ss.Spec.Selector.MatchLabels)
	if sel.Matches(labels.Set(cj.Spec.JobTemplate.Spec.Template.Labels)) {
		t.Error("the backup pod is selected as a CAS replica")
	}
}

// spec.witnessPolicy reaches CAS as a file it reads at start, from a
// ConfigMap the release renders; a malformed policy, or one for CAS in
// SGX, is refused before anything is rendered.
func TestWitnessPolicy(t *testing.T) {
	if _, ss := render(t, casCR(nil)); strings.Contains(strings.Join(ss.Spec.Template.Spec.Containers[0].Args, " "), "--witness-policy") {
		t.Error("no spec.witnessPolicy, yet --witness-policy")
	}
	_, vkey, err := witness.Key(t.TempDir(), "witness.example")
	if err != nil {
		t.Fatal(err)
	}
	policy := "witness w " + vkey + " https://witness.example:7380\nquorum w\n"
	c := casCR(func(c *servicesv1beta1.CAS) { c.Spec.WitnessPolicy = policy })
	out := renderFiles(t, c)
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(out["cas/templates/witnesses.yaml"]), &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["policy"] != policy {
		t.Errorf("the witnesses' ConfigMap: %+v", cm)
	}
	_, ss := render(t, c)
	pod := ss.Spec.Template.Spec
	var mounted, volume bool
	for _, m := range pod.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == "witnesses" && m.ReadOnly && m.MountPath == "/run/cloister/witnesses")
	}
	for _, v := range pod.Volumes {
		volume = volume || (v.Name == "witnesses" && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name)
	}
	if !slices.Contains(pod.Containers[0].Args, "--witness-policy=/run/cloister/witnesses/policy") || !mounted || !volume {
		t.Errorf("args %v, mounted %v, volume %v", pod.Containers[0].Args, mounted, volume)
	}
	k := &Kind{Base: service.Base{DefaultImage: "example.com/cas@sha256:" + strings.Repeat("a", 64)}}
	for name, edit := range map[string]func(*servicesv1beta1.CAS){
		"malformed": func(c *servicesv1beta1.CAS) { c.Spec.WitnessPolicy = "witness w\n" },
		"in SGX": func(c *servicesv1beta1.CAS) {
			c.Spec.WitnessPolicy, c.Spec.SGX = policy, &servicesv1beta1.CASSGX{}
		},
	} {
		if _, _, err := k.Release(casCR(edit), "cloister-system"); err == nil || !strings.Contains(err.Error(), "spec.witnessPolicy") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
