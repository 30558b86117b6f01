package crd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// cfg reaches the API server all tests of this package share; every test
// uses its own object names.
var cfg *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{filepath.Join(repoRoot, CRDDir)}}, &cfg))
}

func obj(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func resourceOf(u *unstructured.Unstructured) schema.GroupVersionResource {
	plural := map[string]string{
		"SGXPlugin": "sgxplugins", "LAS": "las", "CEXPlugin": "cexplugins", "CAS": "cas",
		"SignedPolicy": "signedpolicies", "EncryptedPolicy": "encryptedpolicies",
		"NitroEnclaveDeployment": "nitroenclavedeployments", "NitroPlugin": "nitroplugins", "Vault": "vaults",
	}[u.GetKind()]
	gv, _ := schema.ParseGroupVersion(u.GetAPIVersion())
	return gv.WithResource(plural)
}

func create(t *testing.T, dyn dynamic.Interface, manifest string) (*unstructured.Unstructured, error) {
	t.Helper()
	u := obj(t, manifest)
	ri := dyn.Resource(resourceOf(u))
	if u.GetNamespace() != "" {
		return ri.Namespace(u.GetNamespace()).Create(context.Background(), u, metav1CreateOptions)
	}
	return ri.Create(context.Background(), u, metav1CreateOptions)
}

func TestCRDDefaults(t *testing.T) {
	dyn := dynamic.NewForConfigOrDie(cfg)
	tests := []struct {
		manifest string
		want     map[string]any // field path (dot-separated) -> value
	}{
		{`{apiVersion: base.cloister.dev/v1beta1, kind: LAS, metadata: {name: las}, spec: {}}`,
			map[string]any{"spec.hostPort": int64(18766), "spec.imagePullPolicy": "Always"}},
		{`{apiVersion: base.cloister.dev/v1beta1, kind: SGXPlugin, metadata: {name: sgxplugin}, spec: {}}`,
			map[string]any{"spec.imagePullPolicy": "Always"}},
		{`{apiVersion: base.cloister.dev/v1beta1, kind: CEXPlugin, metadata: {name: cex}, spec: {}}`,
			map[string]any{"spec.cexType": "ep11", "spec.overcommit": int64(1)}},
		{`{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: mycas, namespace: default}, spec: {}}`,
			map[string]any{
				"spec.service.type": "ClusterIP", "spec.service.clientPort": int64(8081), "spec.service.enclavePort": int64(18765),
				"spec.persistence.enabled": false, "spec.persistence.mountPath": "/etc/cas/db", "spec.persistence.size": "1Gi",
				"spec.persistence.accessModes": []any{"ReadWriteOnce"},
			}},
		{`{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: sgxcas, namespace: default}, spec: {sgx: {mrenclave: "` + strings.Repeat("ab", 32) + `"}, persistence: {enabled: true}}}`,
			map[string]any{"spec.sgx.sealing": "MRENCLAVE", "spec.persistence.mountPath": "/etc/cas/db"}},
		{`{apiVersion: enclave.cloister.dev/v1beta1, kind: NitroEnclaveDeployment, metadata: {name: ned, namespace: default},
		   spec: {userPlugins: [{name: app, image: example.com/app:1}]}}`,
			map[string]any{"spec.replicas": int64(1), "spec.enclave.cpus": int64(2), "spec.enclave.memoryMiB": int64(2048),
				"spec.userPlugins": []any{map[string]any{"name": "app", "image": "example.com/app:1", "restartPolicy": "Always"}}}},
	}
	for _, tt := range tests {
		u, err := create(t, dyn, tt.manifest)
		if err != nil {
			t.Fatalf("creating %s: %v", tt.manifest, err)
		}
		for path, want := range tt.want {
			got, found, err := unstructured.NestedFieldNoCopy(u.Object, strings.Split(path, ".")...)
			if err != nil || !found || !equal(got, want) {
				t.Errorf("%s %s = %#v (found %v), want %#v", u.GetKind(), path, got, found, want)
			}
		}
	}
}

func equal(a, b any) bool {
	ja, _ := yaml.Marshal(a)
	jb, _ := yaml.Marshal(b)
	return string(ja) == string(jb)
}

// Bad input is refused by the API server with the field named, and a refused
// update leaves the stored object as it was.
func TestValidationNamesTheField(t *testing.T) {
	dyn := dynamic.NewForConfigOrDie(cfg)
	tests := []struct {
		name     string
		manifest string
		want     []string
	}{
		{"capacitySGXPods 0", `{apiVersion: base.cloister.dev/v1beta1, kind: SGXPlugin, metadata: {name: a}, spec: {capacitySGXPods: 0}}`,
			[]string{"spec.capacitySGXPods", "greater than or equal to 1"}},
		{"capacitySGXPods 10001", `{apiVersion: base.cloister.dev/v1beta1, kind: SGXPlugin, metadata: {name: b}, spec: {capacitySGXPods: 10001}}`,
			[]string{"spec.capacitySGXPods", "less than or equal to 10000"}},
		{"unknown imagePullPolicy", `{apiVersion: base.cloister.dev/v1beta1, kind: LAS, metadata: {name: c}, spec: {imagePullPolicy: Sometimes}}`,
			[]string{"spec.imagePullPolicy", `"Always", "Never", "IfNotPresent"`}},
		{"nodeSelector key", `{apiVersion: base.cloister.dev/v1beta1, kind: SGXPlugin, metadata: {name: d}, spec: {nodeSelector: {"sgx node": "true"}}}`,
			[]string{"spec.nodeSelector", "every nodeSelector key must be a label name"}},
		{"nodeSelector prefix", `{apiVersion: base.cloister.dev/v1beta1, kind: SGXPlugin, metadata: {name: e}, spec: {nodeSelector: {"Cloister.dev/sgx": "true"}}}`,
			[]string{"spec.nodeSelector", "label name"}},
		{"nodeSelector value", `{apiVersion: base.cloister.dev/v1beta1, kind: LAS, metadata: {name: f}, spec: {nodeSelector: {"cloister.dev/sgx": "yes please"}}}`,
			[]string{"spec.nodeSelector.cloister.dev/sgx", "should match"}},
		{"hostPort", `{apiVersion: base.cloister.dev/v1beta1, kind: LAS, metadata: {name: g}, spec: {hostPort: 70000}}`,
			[]string{"spec.hostPort"}},
		{"namespace", `{apiVersion: base.cloister.dev/v1beta1, kind: LAS, metadata: {name: h}, spec: {namespace: Cloister_System}}`,
			[]string{"spec.namespace"}},
		{"cexType", `{apiVersion: base.cloister.dev/v1beta1, kind: CEXPlugin, metadata: {name: i}, spec: {cexType: ep12}}`,
			[]string{"spec.cexType"}},
		{"overcommit", `{apiVersion: base.cloister.dev/v1beta1, kind: CEXPlugin, metadata: {name: j}, spec: {overcommit: 101}}`,
			[]string{"spec.overcommit"}},
		{"APQN domain", `{apiVersion: base.cloister.dev/v1beta1, kind: CEXPlugin, metadata: {name: k}, spec: {configSets: [{name: s, apqns: [{adapter: 1, domain: 300}]}]}}`,
			[]string{"spec.configSets[0].apqns[0].domain"}},
		{"config set names", `{apiVersion: base.cloister.dev/v1beta1, kind: CEXPlugin, metadata: {name: l}, spec: {configSets: [{name: s, apqns: [{adapter: 1, domain: 1}]}, {name: s, apqns: [{adapter: 2, domain: 1}]}]}}`,
			[]string{"configSets names must be unique"}},
		{"CAS nodePorts", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: m, namespace: default}, spec: {service: {nodePorts: {clientPort: 30081}}}}`,
			[]string{"spec.service", "service.nodePorts needs service.type NodePort"}},
		{"CAS service type", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-type, namespace: default}, spec: {service: {type: ExternalName}}}`,
			[]string{"spec.service.type"}},
		{"CAS confidential VM and simulation", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-cvm-sim, namespace: default}, spec: {simulation: true, confidentialVM: {platform: snp, runtimeClassName: kata, measurement: "` + strings.Repeat("ab", 48) + `"}}}`,
			[]string{"confidentialVM and simulation exclude each other"}},
		{"CAS in SGX and simulation", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-sgx-sim, namespace: default}, spec: {simulation: true, sgx: {mrenclave: "` + strings.Repeat("ab", 32) + `"}}}`,
			[]string{"sgx and simulation exclude each other"}},
		{"CAS in SGX and a confidential VM", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-sgx-cvm, namespace: default}, spec: {sgx: {mrenclave: "` + strings.Repeat("ab", 32) + `"}, confidentialVM: {platform: snp, runtimeClassName: kata, measurement: "` + strings.Repeat("ab", 48) + `"}}}`,
			[]string{"sgx and confidentialVM exclude each other"}},
		{"CAS in SGX mrenclave", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-sgx-mr, namespace: default}, spec: {sgx: {mrenclave: "ABCD"}}}`,
			[]string{"spec.sgx.mrenclave"}},
		{"CAS in SGX sealing", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-sgx-seal, namespace: default}, spec: {sgx: {mrenclave: "` + strings.Repeat("ab", 32) + `", sealing: MRLESS}}}`,
			[]string{"spec.sgx.sealing"}},
		{"CAS in SGX with its volume elsewhere", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-sgx-vol, namespace: default}, spec: {sgx: {mrenclave: "` + strings.Repeat("ab", 32) + `"}, persistence: {enabled: true, mountPath: /data}}}`,
			[]string{"mounts CAS's volume at /etc/cas/db only"}},
		{"CAS in SGX without sealing", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-sgx-none, namespace: default}, spec: {sgx: {mrenclave: "` + strings.Repeat("ab", 32) + `"}, sealing: None}}`,
			[]string{"sealing None is not offered in an enclave"}},
		{"CAS in SGX with a DCAP API key", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-sgx-key, namespace: default}, spec: {sgx: {mrenclave: "` + strings.Repeat("ab", 32) + `"}, collateral: {pcs: "https://pcs.example", dcapAPIKeySecret: cloister-dcap-api}}}`,
			[]string{"takes no DCAP API key file from the host"}},
		{"Vault image by tag", `{apiVersion: services.cloister.dev/v1beta1, kind: Vault, metadata: {name: v-tag, namespace: default}, spec: {image: "r/vault:1.14", cas: {name: cas}, runtimeClassName: cloister-cc-sim-v1, policy: {owners: ["k"]}}}`,
			[]string{"pinned by digest"}},
		{"Vault autoUpdate", `{apiVersion: services.cloister.dev/v1beta1, kind: Vault, metadata: {name: v-auto, namespace: default}, spec: {image: "r/vault@sha256:` + strings.Repeat("ab", 32) + `", autoUpdate: true, cas: {name: cas}, runtimeClassName: cloister-cc-sim-v1, policy: {owners: ["k"]}}}`,
			[]string{"a new image is a new pod policy"}},
		{"Vault without owners", `{apiVersion: services.cloister.dev/v1beta1, kind: Vault, metadata: {name: v-owners, namespace: default}, spec: {image: "r/vault@sha256:` + strings.Repeat("ab", 32) + `", cas: {name: cas}, runtimeClassName: cloister-cc-sim-v1, policy: {owners: []}}}`,
			[]string{"spec.policy.owners"}},
		{"Vault replicas", `{apiVersion: services.cloister.dev/v1beta1, kind: Vault, metadata: {name: v-many, namespace: default}, spec: {image: "r/vault@sha256:` + strings.Repeat("ab", 32) + `", replicas: 9, cas: {name: cas}, runtimeClassName: cloister-cc-sim-v1, policy: {owners: ["k"]}}}`,
			[]string{"spec.replicas"}},
		{"CAS autoUpdate", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-auto, namespace: default}, spec: {autoUpdate: true}}`,
			[]string{"CAS is never updated automatically"}},
		{"NED PCRs", `{apiVersion: enclave.cloister.dev/v1beta1, kind: NitroEnclaveDeployment, metadata: {name: ned-pcr, namespace: default}, spec: {enclave: {pcrs: {pcr0: "ABC", pcr1: "` + strings.Repeat("a", 96) + `", pcr2: "` + strings.Repeat("a", 96) + `"}}, userPlugins: [{name: a, image: "r/a:1"}]}}`,
			[]string{"spec.enclave.pcrs.pcr0"}},
		{"NED egress address", `{apiVersion: enclave.cloister.dev/v1beta1, kind: NitroEnclaveDeployment, metadata: {name: ned-egress, namespace: default}, spec: {egress: [{name: db, port: 5432, address: "postgres"}], userPlugins: [{name: a, image: "r/a:1"}]}}`,
			[]string{"spec.egress[0].address"}},
		{"NitroPlugin enclaves", `{apiVersion: base.cloister.dev/v1beta1, kind: NitroPlugin, metadata: {name: nitro-5}, spec: {enclaves: 5}}`,
			[]string{"spec.enclaves"}},
		{"CAS confidential VM measurement", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-cvm-m, namespace: default}, spec: {confidentialVM: {platform: snp, runtimeClassName: kata, measurement: "abcd"}}}`,
			[]string{"spec.confidentialVM.measurement"}},
		{"CAS in a TD without its RTMRs", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-cvm-tdx, namespace: default}, spec: {confidentialVM: {platform: tdx, runtimeClassName: kata, measurement: "` + strings.Repeat("ab", 48) + `"}}}`,
			[]string{"a TDX CAS pins RTMR0 to RTMR2"}},
		{"CAS in an SEV-SNP VM with RTMRs", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-cvm-snp, namespace: default}, spec: {confidentialVM: {platform: snp, runtimeClassName: kata, measurement: "` + strings.Repeat("ab", 48) + `", rtmrs: ["` + strings.Repeat("ab", 48) + `"]}}}`,
			[]string{"rtmrs are TDX's"}},
		{"CAS confidential VM platform", `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: cas-cvm-p, namespace: default}, spec: {confidentialVM: {platform: sgx, runtimeClassName: kata, measurement: "` + strings.Repeat("ab", 48) + `"}}}`,
			[]string{"spec.confidentialVM.platform"}},
		{"signed policy without signatures", `{apiVersion: cas.cloister.dev/v1beta1, kind: SignedPolicy, metadata: {name: o, namespace: default}, spec: {casAddress: "cas:8081", policy: "name: p", signatures: []}}`,
			[]string{"spec.signatures"}},
		{"encrypted policy without key", `{apiVersion: cas.cloister.dev/v1beta1, kind: EncryptedPolicy, metadata: {name: p, namespace: default}, spec: {casAddress: "cas:8081", policy: "AAAA"}}`,
			[]string{"spec.encryptionKey", "Required"}},
		{"duplicate user plugins", `{apiVersion: enclave.cloister.dev/v1beta1, kind: NitroEnclaveDeployment, metadata: {name: q, namespace: default}, spec: {userPlugins: [{name: a, image: img-a}, {name: a, image: img-b}]}}`,
			[]string{"userPlugins names must be unique"}},
		{"enclave cpus", `{apiVersion: enclave.cloister.dev/v1beta1, kind: NitroEnclaveDeployment, metadata: {name: r, namespace: default}, spec: {enclave: {cpus: 1}, userPlugins: [{name: a, image: x}]}}`,
			[]string{"spec.enclave.cpus"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := create(t, dyn, tt.manifest)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}

	// A refused update keeps what was stored.
	good, err := create(t, dyn, `{apiVersion: base.cloister.dev/v1beta1, kind: SGXPlugin, metadata: {name: keep}, spec: {capacitySGXPods: 20}}`)
	if err != nil {
		t.Fatal(err)
	}
	bad := good.DeepCopy()
	if err := unstructured.SetNestedField(bad.Object, int64(0), "spec", "capacitySGXPods"); err != nil {
		t.Fatal(err)
	}
	ri := dyn.Resource(resourceOf(good))
	if _, err := ri.Update(context.Background(), bad, metav1UpdateOptions); err == nil {
		t.Fatal("update to capacitySGXPods 0 accepted")
	}
	stored, err := ri.Get(context.Background(), "keep", metav1GetOptions)
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedInt64(stored.Object, "spec", "capacitySGXPods"); v != 20 || stored.GetResourceVersion() != good.GetResourceVersion() {
		t.Errorf("after a refused update capacitySGXPods = %d (resourceVersion %s -> %s), want 20 unchanged", v, good.GetResourceVersion(), stored.GetResourceVersion())
	}
}

// `kubectl get las`, `kubectl get cas` and the short names resolve, and
// kubectl shows the columns SCONE users know.
func TestNamesScopesAndColumns(t *testing.T) {
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	lists, err := dc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		namespaced bool
		short      []string
	}
	found := map[string]res{}
	for _, l := range lists {
		if !strings.HasSuffix(l.GroupVersion, ".cloister.dev/v1beta1") {
			continue
		}
		for _, r := range l.APIResources {
			found[r.Name] = res{r.Namespaced, r.ShortNames}
		}
	}
	for name, want := range map[string]res{
		"las": {false, nil}, "sgxplugins": {false, []string{"sgx"}}, "cexplugins": {false, []string{"cex"}},
		"cas": {true, nil}, "signedpolicies": {true, []string{"spol"}}, "encryptedpolicies": {true, []string{"epol"}},
		"nitroenclavedeployments": {true, []string{"ned"}}, "vaults": {true, []string{"vlt"}},
	} {
		got, ok := found[name]
		if !ok {
			t.Errorf("resource %q not served", name)
			continue
		}
		if got.namespaced != want.namespaced || strings.Join(got.short, ",") != strings.Join(want.short, ",") {
			t.Errorf("%s: namespaced=%v short=%v, want namespaced=%v short=%v", name, got.namespaced, got.short, want.namespaced, want.short)
		}
	}

	c, err := client.New(cfg, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	columns := map[string][]string{
		"sgxplugins.base.cloister.dev":                 {"State", "Desired", "Ready", "Age"},
		"las.base.cloister.dev":                        {"State", "Desired", "Available", "Age"},
		"cas.services.cloister.dev":                    {"State", "Version", "Ready", "Replicas", "Simulation", "Age"},
		"signedpolicies.cas.cloister.dev":              {"State", "Policy", "Revision", "Hash", "Age"},
		"encryptedpolicies.cas.cloister.dev":           {"State", "Policy", "Revision", "Hash", "Age"},
		"cexplugins.base.cloister.dev":                 {"Type", "State", "Desired", "Ready", "Age"},
		"nitroenclavedeployments.enclave.cloister.dev": {"Ready", "Status", "Age"},
		"vaults.services.cloister.dev":                 {"State", "Ready", "Replicas", "Sealed", "Age"},
	}
	for crdName, want := range columns {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: crdName}, crd); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, col := range crd.Spec.Versions[0].AdditionalPrinterColumns {
			if col.Priority == 0 {
				got = append(got, col.Name)
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s columns %v, want %v", crdName, got, want)
		}
	}
}

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	metav1CreateOptions = metav1.CreateOptions{}
	metav1UpdateOptions = metav1.UpdateOptions{}
	metav1GetOptions    = metav1.GetOptions{}
)

// A policy's spec is the signed (or sealed) output of the CLI: editing a
// field is refused, saying how to change a policy, and the stored object
// stays as it was. Metadata (labels) may still change.
func TestPolicySpecsAreImmutable(t *testing.T) {
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	for _, tt := range []struct {
		manifest, field, want string
	}{
		{`{apiVersion: cas.cloister.dev/v1beta1, kind: SignedPolicy, metadata: {name: frozen, namespace: default},
		   spec: {casAddress: "cas:8081", policy: "name: p", version: 1, signatures: [{signer: "sha256:ab", signature: "c2ln"}]}}`,
			"policy", "sign the changed policy again (cloister policy sign)"},
		{`{apiVersion: cas.cloister.dev/v1beta1, kind: EncryptedPolicy, metadata: {name: frozen, namespace: default},
		   spec: {casAddress: "cas:8081", policy: "AAAA", encryptionKey: "a2V5"}}`,
			"casAddress", "encrypt the changed policy again (cloister policy encrypt)"},
	} {
		good, err := create(t, dyn, tt.manifest)
		if err != nil {
			t.Fatal(err)
		}
		ri := dyn.Resource(resourceOf(good)).Namespace("default")
		bad := good.DeepCopy()
		if err := unstructured.SetNestedField(bad.Object, "edited", "spec", tt.field); err != nil {
			t.Fatal(err)
		}
		_, err = ri.Update(ctx, bad, metav1UpdateOptions)
		if err == nil || !strings.Contains(err.Error(), "spec is immutable") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: editing spec.%s: %v, want it refused saying %q", good.GetKind(), tt.field, err, tt.want)
		}
		stored, err := ri.Get(ctx, "frozen", metav1GetOptions)
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedString(stored.Object, "spec", tt.field); v == "edited" || stored.GetResourceVersion() != good.GetResourceVersion() {
			t.Errorf("%s: after the refused edit spec.%s = %q (resourceVersion %s -> %s)", good.GetKind(), tt.field, v, good.GetResourceVersion(), stored.GetResourceVersion())
		}
		stored.SetLabels(map[string]string{"team": "payments"})
		if _, err := ri.Update(ctx, stored, metav1UpdateOptions); err != nil {
			t.Errorf("%s: a label change refused: %v", good.GetKind(), err)
		}
	}
}

// A CAS's persistence cannot change under it (its database would stay on
// the old volume); the rest of its spec can, and the refusal says what to do.
func TestCASPersistenceIsImmutable(t *testing.T) {
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	good, err := create(t, dyn, `{apiVersion: services.cloister.dev/v1beta1, kind: CAS, metadata: {name: kept, namespace: default},
	   spec: {persistence: {enabled: true, size: 1Gi}}}`)
	if err != nil {
		t.Fatal(err)
	}
	ri := dyn.Resource(resourceOf(good)).Namespace("default")
	bad := good.DeepCopy()
	if err := unstructured.SetNestedField(bad.Object, "2Gi", "spec", "persistence", "size"); err != nil {
		t.Fatal(err)
	}
	if _, err := ri.Update(ctx, bad, metav1UpdateOptions); err == nil || !strings.Contains(err.Error(), "spec.persistence") || !strings.Contains(err.Error(), "persistence cannot change on an existing CAS") {
		t.Errorf("resizing persistence: %v, want it refused naming spec.persistence", err)
	}
	ok := good.DeepCopy()
	if err := unstructured.SetNestedField(ok.Object, true, "spec", "simulation"); err != nil {
		t.Fatal(err)
	}
	if _, err := ri.Update(ctx, ok, metav1UpdateOptions); err != nil {
		t.Errorf("changing spec.simulation: %v", err)
	}
}
