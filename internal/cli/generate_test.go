package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/workload/generate"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	workloadmanifest "github.com/cloister-cc/cloister/internal/workload/manifest"
)

// registryWith serves a real registry holding one image per name (tag
// v1) and returns the registry's host.
func registryWith(t *testing.T, names ...string) string {
	t.Helper()
	host := testenv.Registry(t, nil)
	for _, n := range names {
		testenv.PushRandom(t, host, n)
	}
	return host
}

const shopYAML = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      runtimeClassName: cloister-cc
      containers:
      - name: web
        image: REGISTRY/web:v1
        resources: {limits: {memory: 64Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{port: 443}]
`

func TestGenerate(t *testing.T) {
	host := registryWith(t, "web", "initializer")
	work, resources := t.TempDir(), t.TempDir()
	file := filepath.Join(resources, "shop.yaml")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(shopYAML, "REGISTRY", host)), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(resources, "other.yaml")
	if err := os.WriteFile(plain, []byte("# untouched\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work, "--policy", "shop",
		"--initializer-image", host + "/initializer:v1", resources}

	_, stderr, err := run(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"made " + filepath.Join(work, "workload-owner.pem"), "made " + filepath.Join(work, "seedshare-owner.pem"),
		"Deployment shop/web: policy ", "VM memory 320Mi", "insecure", "wrote " + filepath.Join(work, "manifest.yaml")} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	out, _ := os.ReadFile(file)
	if !strings.Contains(string(out), host+"/web@sha256:") || !strings.Contains(string(out), host+"/initializer@sha256:") {
		t.Errorf("images not pinned:\n%s", out)
	}
	if o, _ := os.ReadFile(plain); string(o) != "# untouched\nkind: ConfigMap\nmetadata: {name: x}\n" {
		t.Errorf("a file without confidential pods was rewritten:\n%s", o)
	}
	for _, key := range []string{"workload-owner.pem", "seedshare-owner.pem"} {
		if info, err := os.Stat(filepath.Join(work, key)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", key, info, err)
		}
	}
	w, err := workloadmanifest.Open(work)
	if err != nil {
		t.Fatal(err)
	}
	doc := w.Doc
	if doc.Name != "shop" || len(doc.Owners.Keys) != 1 || doc.Service("shop-deployment-web") == nil {
		t.Errorf("manifest %+v", doc)
	}
	// The initializer pins the manifest's owner.
	if owners, err := doc.OwnerKeys(); err != nil || len(owners) != 1 ||
		!strings.Contains(string(out), "name: "+initenv.EnvPolicyOwners+"\n          value: "+policy.Fingerprint(owners[0])) {
		t.Errorf("the initializer's %s (%v) in:\n%s", initenv.EnvPolicyOwners, err, out)
	}
	if !strings.Contains(string(out), "name: "+initenv.EnvPolicyOwnerThreshold+"\n          value: \"1\"") {
		t.Errorf("the initializer's %s in:\n%s", initenv.EnvPolicyOwnerThreshold, out)
	}
	manifest, _ := os.ReadFile(filepath.Join(work, "manifest.yaml"))

	// Again, offline: the cache knows the tags, and nothing changes.
	_, stderr, err = run(t, append(args, "--offline")...)
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, stderr)
	}
	if again, _ := os.ReadFile(file); string(again) != string(out) {
		t.Errorf("second run changed the resources:\n%s\n----\n%s", out, again)
	}
	if again, _ := os.ReadFile(filepath.Join(work, "manifest.yaml")); string(again) != string(manifest) {
		t.Error("second run changed the manifest")
	}
	if strings.Contains(stderr, "made ") {
		t.Errorf("second run made keys again:\n%s", stderr)
	}
	// The images' configurations came from the registry once, and offline
	// from the cache: no container is left with an unknown entrypoint.
	if strings.Contains(stderr, "does not pin") {
		t.Errorf("an image's configuration was not known offline:\n%s", stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "image-configs.json")); err != nil {
		t.Error(err)
	}

	// --explain reads the generated YAML and changes nothing.
	explained, _, err := run(t, "generate", "--explain", file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Deployment shop/web (policy ", "the guest allows:", "container web, image " + host + "/web@sha256:", "not enforced: the containers' start order"} {
		if !strings.Contains(explained, want) {
			t.Errorf("--explain lacks %q:\n%s", want, explained)
		}
	}
	if again, _ := os.ReadFile(file); string(again) != string(out) {
		t.Error("--explain changed the file")
	}
}

func TestGenerateRefuses(t *testing.T) {
	host := registryWith(t, "initializer", "web")
	resources := t.TempDir()
	if err := os.WriteFile(filepath.Join(resources, "shop.yaml"), []byte(strings.ReplaceAll(shopYAML, "REGISTRY", host)), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"generate", "--workspace", t.TempDir(), "--initializer-image", host + "/initializer@sha256:" + strings.Repeat("a", 64)}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no platform", []string{resources}, `--reference-values: unknown platform ""`},
		{"a tag offline", []string{"--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--offline", resources}, `containers[0] (web): image "` + host + `/web:v1" names a tag`},
		{"an unreadable owner key", []string{"--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--add-workload-owner-key", "/nonexistent", resources}, "--add-workload-owner-key"},
		{"snp without CAS's identity", []string{"--reference-values", "snp", resources}, "--cas-identity: required for snp"},
		{"no confidential pods", []string{"--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), t.TempDir()}, "no pod template with runtimeClassName cloister-cc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, append(base, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestGenerateDisableUpdates(t *testing.T) {
	host := registryWith(t, "web")
	resources, work := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(resources, "shop.yaml"), []byte(strings.ReplaceAll(shopYAML, "REGISTRY", host)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := run(t, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work, "--disable-updates",
		"--initializer-image", host+"/web:v1", resources)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	w, err := workloadmanifest.Open(work)
	if err != nil || len(w.Doc.Owners.Keys) != 0 {
		t.Fatalf("manifest owners %v, %v", w, err)
	}
	if _, err := os.Stat(filepath.Join(work, "workload-owner.pem")); err == nil {
		t.Error("a workload owner key was made for an immutable manifest")
	}
}

// "-" reads standard input and writes the result to standard output.
func TestGenerateStdin(t *testing.T) {
	host := registryWith(t, "web", "initializer")
	work := t.TempDir()
	in := strings.ReplaceAll(shopYAML, "REGISTRY", host)
	out, stderr, err := runWithInput(t, in, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work,
		"--initializer-image", host+"/initializer:v1", "-")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(out, host+"/web@sha256:") || !strings.Contains(out, "io.katacontainers.config.hypervisor.cc_init_data") {
		t.Errorf("standard output:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(work, "manifest.yaml")); err != nil {
		t.Error(err)
	}
}

// A pod with the mesh annotations gets the mesh image pinned from the
// registry; a pod without them needs no mesh image, even offline.
func TestGenerateServiceMesh(t *testing.T) {
	host := registryWith(t, "web", "initializer", "mesh")
	meshed := strings.Replace(strings.ReplaceAll(shopYAML, "REGISTRY", host), "metadata: {labels: {app: web}}",
		"metadata: {labels: {app: web}, annotations: {cloister.dev/servicemesh-ingress: \"main#8001#false\"}}", 1)
	out, stderr, err := runWithInput(t, meshed, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", t.TempDir(),
		"--initializer-image", host+"/initializer:v1", "--mesh-image", host+"/mesh:v1", "-")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if strings.Count(out, "image: "+host+"/mesh@sha256:") != 2 || !strings.Contains(out, "VM memory 384Mi") && !strings.Contains(stderr, "VM memory 384Mi") {
		t.Errorf("the mesh containers:\n%s\n%s", out, stderr)
	}
	out, stderr, err = runWithInput(t, meshed, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", t.TempDir(),
		"--initializer-image", host+"/initializer:v1", "--mesh-image", host+"/mesh:v1", "--skip-service-mesh", "-")
	if err != nil || strings.Contains(out, "/mesh") {
		t.Errorf("skip-service-mesh: %v\n%s\n%s", err, out, stderr)
	}
	// Offline, with the mesh image unknown: only a meshed pod needs it.
	work := t.TempDir()
	plain := strings.ReplaceAll(shopYAML, "REGISTRY", host)
	if _, stderr, err := runWithInput(t, plain, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work,
		"--initializer-image", host+"/initializer:v1", "--mesh-image", "mesh.example/mesh:v9", "-"); err != nil {
		t.Fatalf("a pod without the mesh: %v\n%s", err, stderr)
	}
	if _, _, err := runWithInput(t, meshed, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work, "--offline",
		"--initializer-image", host+"/initializer:v1", "--mesh-image", "mesh.example/mesh:v9", "-"); err == nil ||
		!strings.Contains(err.Error(), "(cloister-mesh-redirect): image \"mesh.example/mesh:v9\" names a tag") {
		t.Errorf("a meshed pod offline without the mesh image: %v", err)
	}
}

// A private key generate writes into a git work tree that does not ignore
// it is one `git add -A` from being committed: generate says so, and is
// quiet once the tree ignores it.
func TestGenerateWarnsOfKeysGitWouldCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH")
	}
	host := registryWith(t, "web", "initializer")
	for _, tc := range []struct {
		name, gitignore string
		warn            bool
	}{{"not ignored", "", true}, {"ignored", "*.pem\n", false}} {
		t.Run(tc.name, func(t *testing.T) {
			tree := t.TempDir()
			if out, err := exec.Command("git", "init", "-q", tree).CombinedOutput(); err != nil {
				t.Fatalf("git init: %v\n%s", err, out)
			}
			if err := os.WriteFile(filepath.Join(tree, ".gitignore"), []byte(tc.gitignore), 0o644); err != nil {
				t.Fatal(err)
			}
			resources := filepath.Join(tree, "resources")
			if err := os.MkdirAll(resources, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(resources, "shop.yaml"), []byte(strings.ReplaceAll(shopYAML, "REGISTRY", host)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, stderr, err := run(t, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", tree, "--policy", "shop",
				"--initializer-image", host+"/initializer:v1", resources)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			for _, key := range []string{"workload-owner.pem", "seedshare-owner.pem"} {
				warned := strings.Contains(stderr, "warning: "+filepath.Join(tree, key)+" is a private key inside the git work tree")
				if warned != tc.warn {
					t.Errorf("%s: warned %v, want %v:\n%s", key, warned, tc.warn, stderr)
				}
			}
		})
	}
}

// A CLI built without pinned images defaults to the images of its release,
// and one that is no release says how to get them instead of naming an
// image that cannot exist.
func TestReleaseImage(t *testing.T) {
	for _, tc := range []struct{ version, want, err string }{
		{"v1.2.3", "ghcr.io/cloister-cc/cloister-initializer:v1.2.3", ""},
		{"v1.3.0-rc.1", "ghcr.io/cloister-cc/cloister-initializer:v1.3.0-rc.1", ""},
		{"devel", "", "version devel) was built without pinned images and is no release: build it with make build"},
		{"v0.0.0-20261126061010-abcdefabcdef", "", "is no release"},
		{"v1.2.4-0.20261126061010-abcdefabcdef", "", "is no release"},
		{"v1.2.3+dirty", "", "is no release"},
	} {
		got, err := releaseImageAt("cloister-initializer", tc.version)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %q, %v; want %q, %q", tc.version, got, err, tc.want, tc.err)
		}
	}
}

func TestGenerateWithoutPinnedImages(t *testing.T) {
	host := registryWith(t, "web", "initializer")
	work, resources := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(resources, "shop.yaml"), []byte(strings.ReplaceAll(shopYAML, "REGISTRY", host)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The test binary is no release and has no pinned images.
	_, _, err := run(t, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work, "--policy", "shop", resources)
	if err == nil || !strings.Contains(err.Error(), "the initializer image (--initializer-image): this cloister (version ") ||
		!strings.Contains(err.Error(), "make build") {
		t.Errorf("without an initializer image: %v", err)
	}
	meshed := strings.Replace(strings.ReplaceAll(shopYAML, "REGISTRY", host), "    metadata: {labels: {app: web}}",
		"    metadata: {labels: {app: web}, annotations: {cloister.dev/servicemesh-ingress: \"\"}}", 1)
	if err := os.WriteFile(filepath.Join(resources, "shop.yaml"), []byte(meshed), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, "generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", work, "--policy", "shop",
		"--initializer-image", host+"/initializer:v1", resources)
	if !errors.Is(err, generate.ErrNoMeshImage) || !strings.Contains(err.Error(), "give one with --mesh-image: this cloister") {
		t.Errorf("a meshed pod without a mesh image: %v", err)
	}
}

// casSimKeyFile is a simulated CAS's public key in a file, for generate
// --cas-sim-key.
func casSimKeyFile(t *testing.T) string {
	t.Helper()
	k, err := keyfile.LoadOrCreate("")
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, t.TempDir(), "cas.pem", string(policy.MarshalPublicKey(&k.PublicKey)))
}
