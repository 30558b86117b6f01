package cli

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/enclave/eif"
)

// enclave build reads the resource, fetches its plugin's image by digest
// from a registry (go-containerregistry's, in memory), writes the image
// file and prints the PCRs, which describe reads back from the file;
// a second build writes the same bytes.
func TestEnclaveBuildAndDescribe(t *testing.T) {
	ref := testenv.PushRandom(t, testenv.Registry(t, nil), "web")
	dir := t.TempDir()
	exe, _ := os.Executable()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ned := write("ned.yaml", `apiVersion: enclave.cloister.dev/v1beta1
kind: NitroEnclaveDeployment
metadata:
  name: web
spec:
  manifestKey: |
    `+strings.ReplaceAll(strings.TrimSpace(testPublicKeyPEM(t)), "\n", "\n    ")+`
  userPlugins:
  - name: web
    image: `+ref.String()+`
`)
	args := []string{"enclave", "build", "-f", ned, "--kernel", write("bzImage", "kernel"), "--init", write("init", "init"), "--nsm", write("nsm.ko", "nsm"),
		"--orchestrator", exe}
	out, stderr, err := run(t, append(args, "-o", filepath.Join(dir, "one.eif"))...)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "PCR0 ") || len(lines[2]) != len("PCR2 ")+96 {
		t.Fatalf("printed %q", out)
	}
	one, _ := os.ReadFile(filepath.Join(dir, "one.eif"))
	parsed, err := eif.Parse(one)
	if err != nil {
		t.Fatal(err)
	}
	p0, p1, p2 := eif.Measure(parsed).Hex()
	if out != "PCR0 "+p0+"\nPCR1 "+p1+"\nPCR2 "+p2+"\n" {
		t.Errorf("printed %q, the file measures %s %s %s", out, p0, p1, p2)
	}
	if _, _, err := run(t, append(args, "-o", filepath.Join(dir, "two.eif"))...); err != nil {
		t.Fatal(err)
	}
	if two, _ := os.ReadFile(filepath.Join(dir, "two.eif")); string(two) != string(one) {
		t.Error("two builds differ")
	}
	described, _, err := run(t, "enclave", "describe", filepath.Join(dir, "one.eif"))
	if err != nil || described != out {
		t.Errorf("describe printed %q, %v; build printed %q", described, err, out)
	}

	// --push makes the pods' image (the base with the file) and --update
	// writes it, by digest, and the PCRs into the resource's file.
	host := strings.Split(ref.Name(), "/")[0]
	base := testenv.PushRandom(t, host, "cloister-enclave")
	pushArgs := append(append([]string{}, args...), "-o", filepath.Join(dir, "three.eif"), "--push", host+"/web-enclave:v1", "--base", base.String(), "--update")
	if _, stderr, err := run(t, pushArgs...); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var pinned enclavev1beta1.NitroEnclaveDeployment
	if err := yaml.UnmarshalStrict(mustReadFile(t, ned), &pinned); err != nil {
		t.Fatal(err)
	}
	if p := pinned.Spec.Enclave.PCRs; p == nil || p.PCR0 != p0 || p.PCR1 != p1 || p.PCR2 != p2 || !strings.HasPrefix(pinned.Spec.Image, host+"/web-enclave@sha256:") {
		t.Fatalf("the resource after --update: image %q, pcrs %+v", pinned.Spec.Image, pinned.Spec.Enclave.PCRs)
	}
	podImage, err := name.NewDigest(pinned.Spec.Image)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(podImage)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	layers, _ := img.Layers()
	if len(layers) != 3 || cfg.Config.Labels["dev.cloister.enclave.pcr0"] != p0 {
		t.Errorf("pod image: %d layers (the base's 2 and the file), labels %v", len(layers), cfg.Config.Labels)
	}
	rc, _ := layers[2].Uncompressed()
	tr := tar.NewReader(rc)
	found := false
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		if h.Name == "enclave/enclave.eif" {
			data, _ := io.ReadAll(tr)
			found = string(data) == string(one)
		}
	}
	_ = rc.Close()
	if !found {
		t.Error("the pod image does not carry the enclave image file at /enclave/enclave.eif")
	}

	// A tag, an unknown field and a damaged file are refused.
	tagged := write("tagged.yaml", strings.Replace(string(mustReadFile(t, ned)), "@"+ref.DigestStr(), ":v1", 1))
	if _, _, err := run(t, "enclave", "build", "-f", tagged, "--kernel", args[5], "--init", args[7], "--nsm", args[9], "--orchestrator", exe, "-o", filepath.Join(dir, "x.eif")); err == nil || !strings.Contains(err.Error(), "by digest") {
		t.Errorf("a tag: %v", err)
	}
	unknown := write("unknown.yaml", string(mustReadFile(t, ned))+"  replicaz: 2\n")
	if _, _, err := run(t, "enclave", "build", "-f", unknown, "--kernel", args[5], "--init", args[7], "--nsm", args[9], "--orchestrator", exe, "-o", filepath.Join(dir, "x.eif")); err == nil || !strings.Contains(err.Error(), "replicaz") {
		t.Errorf("an unknown field: %v", err)
	}
	one[len(one)-1] ^= 1
	damaged := write("damaged.eif", string(one))
	if _, _, err := run(t, "enclave", "describe", damaged); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("a damaged file: %v", err)
	}
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
