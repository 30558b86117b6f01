package generate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/mesh/annotation"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// digests resolves the test's tags; anything else is unknown.
type digests map[string]string

func (d digests) Resolve(_ context.Context, image string) (string, error) {
	if ref, ok := d[image]; ok {
		return ref, nil
	}
	return "", fmt.Errorf("image %q: not found", image)
}

func sha(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

var testImages = digests{
	"nginx:1.27":              "nginx@" + sha('a'),
	"registry.example/api:v2": "registry.example/api@" + sha('b'),
	"postgres:17":             "postgres@" + sha('c'),
}

const threeTier = `# The shop: web -> api -> db.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels:
        app: web
    spec:
      runtimeClassName: cloister-cc # made confidential by generate
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 8080
        resources:
          limits:
            memory: 128Mi
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  selector:
    app: web
  ports:
  - port: 443
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: shop
spec:
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      runtimeClassName: cloister-cc
      initContainers:
      - name: migrate
        image: registry.example/api:v2
        args: ["migrate"]
      containers:
      - name: db
        image: postgres:17
        env:
        - name: PGDATA
          value: /data/pg   # on the volume
        resources:
          requests: {memory: 1Gi}
          limits: {memory: 1Gi}
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: report
  namespace: shop
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          runtimeClassName: cloister-cc
          restartPolicy: Never
          containers:
          - name: report
            image: registry.example/api:v2
            resources:
              limits:
                memory: 64Mi
---
# Not confidential: left exactly as it is.
apiVersion: v1
kind: Pod
metadata:
  name: plain
spec:
  containers:
  - name: plain
    image: busybox:latest
`

func options() Options {
	return Options{
		RuntimeClass:     "cloister-cc-sim-0123abcd",
		InitializerImage: "ghcr.io/cloister-cc/cloister-initializer@" + sha('f'),
		CAS:              "cas.default.svc:8081",
		Policy:           "shop",
		CASExpect:        `{"allowSimulation":true}`,
		OverheadMiB:      256,
		Resolver:         testImages,
	}
}

func rewrite(t *testing.T, in string, opts Options) (string, *Result) {
	t.Helper()
	out, res, err := Rewrite(context.Background(), []byte(in), opts)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), res
}

// docs splits a stream and decodes document i into v.
func doc(t *testing.T, stream string, i int, v any) {
	t.Helper()
	parts := strings.Split(stream, "\n---\n")
	if err := sigsyaml.Unmarshal([]byte(parts[i]), v); err != nil {
		t.Fatalf("document %d: %v\n%s", i, err, parts[i])
	}
}

func TestRewriteMakesPodsConfidential(t *testing.T) {
	out, res := rewrite(t, threeTier, options())

	if len(res.Workloads) != 3 {
		t.Fatalf("workloads %+v", res.Workloads)
	}
	var web appsv1.Deployment
	doc(t, out, 0, &web)
	pod := web.Spec.Template.Spec
	if *pod.RuntimeClassName != "cloister-cc-sim-0123abcd" {
		t.Errorf("runtimeClassName %q", *pod.RuntimeClassName)
	}
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != InitializerName || pod.InitContainers[0].Image != options().InitializerImage {
		t.Fatalf("init containers %+v", pod.InitContainers)
	}
	env := map[string]string{}
	for _, e := range pod.InitContainers[0].Env {
		env[e.Name] = e.Value
	}
	if env[initenv.EnvService] != "shop-deployment-web" || env[initenv.EnvCAS] != "cas.default.svc:8081" || env[initenv.EnvPolicy] != "shop" ||
		env[laswire.EnvAddr] != "http://$(CLOISTER_NODE_IP):18766" || env[initenv.EnvExpect] != `{"allowSimulation":true}` {
		t.Errorf("initializer env %v", env)
	}
	if pod.Containers[0].Image != "nginx@"+sha('a') {
		t.Errorf("image %q", pod.Containers[0].Image)
	}
	if m := pod.Containers[0].VolumeMounts; len(m) != 1 || m[0].Name != SecretsVolume || m[0].MountPath != initenv.SecretsPath {
		t.Errorf("mounts %+v", m)
	}
	if v := pod.Volumes; len(v) != 1 || v[0].EmptyDir == nil || v[0].EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("volumes %+v", v)
	}
	// The annotation is the policy of the pod as written, and its digest
	// is the workload's.
	policy, digest, err := podpolicy.FromAnnotation(web.Spec.Template.Annotations[podpolicy.Annotation])
	if err != nil {
		t.Fatal(err)
	}
	again, _ := podpolicy.Of(&pod, web.Spec.Template.Annotations)
	if digest != res.Workloads[0].Digest || string(policy.Canonical()) != string(again.Canonical()) {
		t.Errorf("annotation does not describe the pod:\n%s\n%s", policy.Canonical(), again.Canonical())
	}
	if w := res.Workloads[0]; w.Service != "shop-deployment-web" || w.MemoryMiB != 128+256 || w.Labels["app"] != "web" {
		t.Errorf("workload %+v", w)
	}
	// The initializer comes first, before the pod's own init containers.
	if !strings.Contains(out, "        - name: cloister-initializer") {
		t.Errorf("output:\n%s", out)
	}
	var db appsv1.StatefulSet
	doc(t, out, 2, &db)
	if ic := db.Spec.Template.Spec.InitContainers; len(ic) != 2 || ic[0].Name != InitializerName || ic[1].Image != "registry.example/api@"+sha('b') {
		t.Errorf("db init containers %+v", ic)
	}
	if res.Workloads[2].Service != "shop-cronjob-report" || res.Workloads[2].MemoryMiB != 64+256 {
		t.Errorf("cron job %+v", res.Workloads[2])
	}
	if len(res.Services) != 1 || res.Services[0].Selector["app"] != "web" {
		t.Errorf("services %+v", res.Services)
	}
	// Comments and untouched documents stay.
	for _, keep := range []string{"# The shop: web -> api -> db.", "# on the volume", "# Not confidential: left exactly as it is.",
		"kind: Pod\nmetadata:\n  name: plain\nspec:\n  containers:\n  - name: plain\n    image: busybox:latest\n"} {
		if !strings.Contains(out, keep) {
			t.Errorf("lost %q:\n%s", keep, out)
		}
	}
}

func TestRewriteTwiceChangesNothing(t *testing.T) {
	once, _ := rewrite(t, threeTier, options())
	twice, _ := rewrite(t, once, options())
	if once != twice {
		t.Errorf("second run changed the output:\n%s\n---- second ----\n%s", once, twice)
	}
}

// A pod changed after generate gets another digest when generate runs
// again: the runtime class generate wrote still marks it.
func TestRewriteAgainFollowsAChangedPod(t *testing.T) {
	once, res := rewrite(t, threeTier, options())
	changed := strings.Replace(once, "nginx@"+sha('a'), "nginx@"+sha('e'), 1)
	_, res2 := rewrite(t, changed, options())
	if res2.Workloads[0].Digest == res.Workloads[0].Digest {
		t.Error("same digest for another image")
	}
	if res2.Workloads[1].Digest != res.Workloads[1].Digest {
		t.Error("an unchanged workload changed its digest")
	}
}

func TestRewriteRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		opts           func(*Options)
		want           string
	}{
		{"no memory limit", "          limits:\n            memory: 128Mi\n", "          limits: {}\n", nil,
			"Deployment shop/web: containers[0] (web): resources.limits.memory is not set"},
		{"request below limit", "requests: {memory: 1Gi}", "requests: {memory: 512Mi}", nil,
			"StatefulSet shop/db: containers[0] (db): resources.requests.memory 512Mi differs from the limit 1Gi"},
		{"unknown image", "postgres:17", "postgres:18", nil, `containers[0] (db): image "postgres:18": not found`},
		{"tag without resolver", "", "", func(o *Options) { o.Resolver = nil }, `initContainers[1] (migrate): image "registry.example/api:v2" has no digest`},
		{"malformed mesh annotation", "      labels:\n        app: web\n",
			"      labels:\n        app: web\n      annotations:\n        " + annotation.IngressAnnotation + ": \"main#80801#false\"\n", nil,
			`Deployment shop/web: annotation ` + annotation.IngressAnnotation + `: ingress entry 1 "main#80801#false": port "80801" is not a port (1-65535)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.Replace(threeTier, tc.from, tc.to, 1)
			opts := options()
			if tc.opts != nil {
				tc.opts(&opts)
			}
			if tc.name == "tag without resolver" {
				in = strings.Replace(in, "nginx:1.27", "nginx@"+sha('a'), 1)
			}
			_, _, err := Rewrite(context.Background(), []byte(in), opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestFixResourcesSetsRequestsToLimits(t *testing.T) {
	in := strings.Replace(threeTier, "requests: {memory: 1Gi}", "requests: {memory: 512Mi}", 1)
	opts := options()
	opts.FixResources = true
	out, _ := rewrite(t, in, opts)
	var db appsv1.StatefulSet
	doc(t, out, 2, &db)
	r := db.Spec.Template.Spec.Containers[0].Resources
	if r.Requests.Memory().Cmp(*r.Limits.Memory()) != 0 {
		t.Errorf("resources %+v", r)
	}
}

func TestSkipInitializer(t *testing.T) {
	opts := options()
	opts.SkipInitializer = true
	out, _ := rewrite(t, threeTier, opts)
	var web appsv1.Deployment
	doc(t, out, 0, &web)
	if len(web.Spec.Template.Spec.InitContainers) != 0 || len(web.Spec.Template.Spec.Volumes) != 0 {
		t.Errorf("skip-initializer injected: %+v", web.Spec.Template.Spec)
	}
	annotated := strings.Replace(threeTier, "      labels:\n        app: web\n",
		"      labels:\n        app: web\n      annotations:\n        "+SkipInitializerAnnotation+": \"true\"\n", 1)
	out, _ = rewrite(t, annotated, options())
	doc(t, out, 0, &web)
	if len(web.Spec.Template.Spec.InitContainers) != 0 {
		t.Errorf("the annotation did not skip: %+v", web.Spec.Template.Spec.InitContainers)
	}
	if web.Spec.Template.Annotations[podpolicy.Annotation] == "" {
		t.Error("a pod without the initializer still needs its policy")
	}
}

func TestManifestNamesEveryWorkloadByItsDigest(t *testing.T) {
	_, res := rewrite(t, threeTier, options())
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	owner := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	doc, err := Manifest{Name: "shop", Platform: runtimeclass.Sim, OwnerKeys: []string{owner}}.Document(res.Workloads, res.Services)
	if err != nil {
		t.Fatal(err)
	}
	if !doc.AllowSimulation || doc.Name != "shop" || len(doc.Services) != 3 || len(doc.Secrets) != 0 {
		t.Fatalf("manifest %+v", doc)
	}
	web := doc.Service("shop-deployment-web")
	if web == nil {
		t.Fatalf("no web service in %+v", doc.Services)
	}
	id := web.Attestation.Identities
	if len(id) != 1 || id[0].Type != "sim" || id[0].HostData.String() != res.Workloads[0].Digest {
		t.Errorf("identity %+v, digest %s", id, res.Workloads[0].Digest)
	}
	if strings.Join(web.Certificate.SANs, ",") != "web,web.shop,web.shop.svc,web.shop.svc.cluster.local" {
		t.Errorf("web SANs %v", web.Certificate.SANs)
	}
	if db := doc.Service("shop-statefulset-db"); db == nil || strings.Join(db.Certificate.SANs, ",") != "db.shop" {
		t.Errorf("db without a Service: %+v", db)
	}

	// A LoadBalancer's addresses, as kubectl get -o yaml exports them,
	// are proposed in the manifest: the owners sign them with it.
	lb := strings.Replace(threeTier, "spec:\n  selector:\n    app: web\n",
		"spec:\n  type: LoadBalancer\n  loadBalancerIP: 203.0.113.10\n  externalIPs: [203.0.113.11]\n  selector:\n    app: web\n", 1)
	lb = strings.Replace(lb, "  - port: 443\n", "  - port: 443\nstatus:\n  loadBalancer:\n    ingress: [{ip: 203.0.113.10}, {hostname: web.example.test}]\n", 1)
	_, lbRes := rewrite(t, lb, options())
	lbDoc, err := Manifest{Name: "shop", Platform: runtimeclass.Sim, OwnerKeys: []string{owner}}.Document(lbRes.Workloads, lbRes.Services)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(lbDoc.Service("shop-deployment-web").Certificate.SANs, ","); got != "web,web.shop,web.shop.svc,web.shop.svc.cluster.local,203.0.113.10,203.0.113.11,web.example.test" {
		t.Errorf("the LoadBalancer's SANs: %s", got)
	}
	bad := strings.Replace(lb, "loadBalancerIP: 203.0.113.10", "loadBalancerIP: somewhere", 1)
	if _, _, err := Rewrite(context.Background(), []byte(bad), options()); err == nil || !strings.Contains(err.Error(), `Service shop/web: spec.loadBalancerIP: "somewhere" is not an IP address`) {
		t.Errorf("a LoadBalancer IP that is none: %v", err)
	}
	if web.Files[WorkloadSecretFile] != "{{ .WorkloadSecret.Hex }}" || web.WorkloadSecretID != "shop-deployment-web" {
		t.Errorf("files %v, workload secret id %q", web.Files, web.WorkloadSecretID)
	}

	if _, err := (Manifest{Name: "shop", Platform: runtimeclass.SNP}).Document(res.Workloads, res.Services); err == nil || !strings.Contains(err.Error(), "snp.measurement") {
		t.Errorf("snp without reference values: %v", err)
	}
	for _, bad := range []string{"snp: {}\n", "snp:\n  minTCB: {snp: 8}\n", "tdx:\n  rtmr: ['']\n", "tdx:\n  mrtd: abcd\n"} {
		if _, err := refvalues.Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "launch measurement, 48 bytes") {
			t.Errorf("reference values %q without a launch measurement: %v", bad, err)
		}
	}
	// A TD's MRTD is its firmware: its kernel, initrd and command line
	// are in RTMR0-2, which the values must give.
	mrtdOnly, err := refvalues.Parse([]byte("tdx:\n  mrtd: " + strings.Repeat("ab", 48) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Manifest{Name: "shop", Platform: runtimeclass.TDX, Reference: mrtdOnly}).Document(res.Workloads, res.Services); err == nil || !strings.Contains(err.Error(), "tdx.rtmr") {
		t.Errorf("tdx values with MRTD only: %v", err)
	}
	rtmr := "['" + strings.Repeat("01", 48) + "', '" + strings.Repeat("02", 48) + "', '" + strings.Repeat("03", 48) + "']"
	ref, err := refvalues.Parse([]byte("tdx:\n  mrtd: " + strings.Repeat("ab", 48) + "\n  rtmr: " + rtmr + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	tdx, err := Manifest{Name: "shop", Platform: runtimeclass.TDX, Reference: ref}.Document(res.Workloads, res.Services)
	if err != nil {
		t.Fatal(err)
	}
	if id := tdx.Services[0].Attestation.Identities[0]; len(id.MRCONFIGID) != 48 || !strings.HasPrefix(id.MRCONFIGID.String(), res.Workloads[0].Digest) || tdx.AllowSimulation {
		t.Errorf("tdx identity %+v", id)
	}
}

func TestInspectAndCheckManifest(t *testing.T) {
	out, res := rewrite(t, threeTier, options())
	doc, err := Manifest{Name: "shop", Platform: runtimeclass.Sim}.Document(res.Workloads, res.Services)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Inspect([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckManifest(doc, got.Workloads); err != nil {
		t.Fatalf("generate's own output: %v", err)
	}
	// The YAML changed after generate: another image, same annotation.
	changed, err := Inspect([]byte(strings.Replace(out, "postgres@"+sha('c'), "postgres@"+sha('d'), 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckManifest(doc, changed.Workloads); err != nil {
		t.Fatalf("the annotation did not change, so neither did the digest: %v", err)
	}
	// Generated again: the manifest no longer matches that workload.
	regenerated, res2 := rewrite(t, strings.Replace(out, "postgres@"+sha('c'), "postgres@"+sha('d'), 1), options())
	got2, _ := Inspect([]byte(regenerated))
	if err := CheckManifest(doc, got2.Workloads); err == nil || !strings.Contains(err.Error(), "StatefulSet shop/db: its policy "+res2.Workloads[1].Digest[:16]+" is not the manifest's") {
		t.Errorf("changed workload: %v", err)
	}
	// A workload missing from the YAML, and YAML without annotations.
	if err := CheckManifest(doc, got.Workloads[:2]); err == nil || !strings.Contains(err.Error(), "service shop-cronjob-report is no workload") {
		t.Errorf("missing workload: %v", err)
	}
	if _, err := Inspect([]byte(threeTier)); err == nil || !strings.Contains(err.Error(), "Deployment shop/web: no policy annotation") {
		t.Errorf("ungenerated YAML: %v", err)
	}
}

// Pods in confidential VMs attest with their VM's own evidence: the
// initializer says so, asks no LAS, and may open the guest's TEE device;
// test roots reach it only when given. The pod policy covers all of it.
func TestGuestEvidenceInitializer(t *testing.T) {
	for _, guest := range []bool{false, true} {
		opts := options()
		opts.GuestEvidence = guest
		if guest {
			opts.TestRoots = "-----BEGIN CERTIFICATE-----\n...\n"
		}
		out, res := rewrite(t, threeTier, opts)
		var web appsv1.Deployment
		doc(t, out, 0, &web)
		ic := web.Spec.Template.Spec.InitContainers[0]
		env := map[string]string{}
		for _, e := range ic.Env {
			env[e.Name] = e.Value
		}
		_, las := env[laswire.EnvAddr]
		privileged := ic.SecurityContext != nil && ic.SecurityContext.Privileged != nil && *ic.SecurityContext.Privileged
		if (env[initenv.EnvEvidence] == initenv.EvidenceGuest) != guest || las == guest || privileged != guest || (env[initenv.EnvInsecureTestRoots] != "") != guest {
			t.Errorf("guest %v: env %v, privileged %v", guest, env, privileged)
		}
		if guest {
			_, plain := rewrite(t, threeTier, options())
			if res.Workloads[0].Digest == plain.Workloads[0].Digest {
				t.Error("the pod policy does not cover the initializer's evidence mode")
			}
		}
	}
}

// A witness policy reaches the initializer's environment, and so the pod
// policy: a host cannot drop the pod's requirement of recent
// cosignatures of CAS's log.
func TestWitnessPolicyInitializer(t *testing.T) {
	opts := options()
	opts.WitnessPolicy, opts.WitnessMaxAge = "witness w k http://w\nquorum w\n", "1h"
	out, res := rewrite(t, threeTier, opts)
	var web appsv1.Deployment
	doc(t, out, 0, &web)
	env := map[string]string{}
	for _, e := range web.Spec.Template.Spec.InitContainers[0].Env {
		env[e.Name] = e.Value
	}
	if env[initenv.EnvWitnessPolicy] != opts.WitnessPolicy || env[initenv.EnvWitnessMaxAge] != "1h" {
		t.Errorf("the initializer's env: %v", env)
	}
	if _, plain := rewrite(t, threeTier, options()); res.Workloads[0].Digest == plain.Workloads[0].Digest {
		t.Error("the pod policy does not cover the witness policy")
	}
}

// The workload secret id is the pod template's annotation (Contrast's
// name for it too), the service name without one; the manifest carries
// it, and CheckManifest sees when the YAML's changed after generate.
func TestWorkloadSecretID(t *testing.T) {
	annotate := func(lines string) string {
		return strings.Replace(threeTier, "      labels:\n        app: web\n", "      labels:\n        app: web\n      annotations:\n"+lines, 1)
	}
	// As generate and then set do: the manifest from Rewrite, checked
	// against what Inspect reads of the rewritten YAML.
	secretID := func(in string) (string, error) {
		out, res, err := Rewrite(context.Background(), []byte(in), options())
		if err != nil {
			return "", err
		}
		doc, err := Manifest{Name: "shop", Platform: runtimeclass.Sim}.Document(res.Workloads, res.Services)
		if err != nil {
			return "", err
		}
		found, err := Inspect(out)
		if err != nil {
			return "", err
		}
		if err := CheckManifest(doc, found.Workloads); err != nil {
			return "", err
		}
		return doc.Service("shop-deployment-web").WorkloadSecretID, nil
	}
	for _, tc := range []struct{ name, in, want, wantErr string }{
		{"none", threeTier, "shop-deployment-web", ""},
		{"cloister's", annotate("        " + WorkloadSecretIDAnnotation + ": shop/orders\n"), "shop/orders", ""},
		{"contrast's", annotate("        " + ContrastWorkloadSecretIDAnnotation + ": shop/orders\n"), "shop/orders", ""},
		{"both, the same", annotate("        " + WorkloadSecretIDAnnotation + ": shop/orders\n        " + ContrastWorkloadSecretIDAnnotation + ": shop/orders\n"), "shop/orders", ""},
		{"both, different", annotate("        " + WorkloadSecretIDAnnotation + ": shop/orders\n        " + ContrastWorkloadSecretIDAnnotation + ": shop/other\n"), "",
			`annotations cloister.dev/workload-secret-id "shop/orders" and contrast.edgeless.systems/workload-secret-id "shop/other" name two workload secrets: keep one`},
		{"not an id", annotate("        " + WorkloadSecretIDAnnotation + ": \"../etc\"\n"), "", `Deployment shop/web: annotation cloister.dev/workload-secret-id: "../etc": use letters, digits`},
		{"not an id, by Contrast's name", annotate("        " + ContrastWorkloadSecretIDAnnotation + ": \"a b\"\n"), "", `Deployment shop/web: annotation contrast.edgeless.systems/workload-secret-id: "a b": use letters, digits`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := secretID(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("workload secret id %q (%v), want %q", got, err, tc.want)
			}
		})
	}

	// The YAML's id changed after generate wrote the manifest.
	_, res, err := Rewrite(context.Background(), []byte(threeTier), options())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := Manifest{Name: "shop", Platform: runtimeclass.Sim}.Document(res.Workloads, res.Services)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := Rewrite(context.Background(), []byte(annotate("        "+WorkloadSecretIDAnnotation+": shop/orders\n")), options())
	if err != nil {
		t.Fatal(err)
	}
	changed, err := Inspect(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckManifest(doc, changed.Workloads); err == nil || !strings.Contains(err.Error(), `Deployment shop/web: its workload secret id "shop/orders" is not the manifest's "shop-deployment-web"`) {
		t.Errorf("a changed id: %v", err)
	}
}
