package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// writeKubeconfig writes a kubeconfig of cfg, as a user's.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// The VM memory counts the installed RuntimeClass's overhead when
// generate is given the cluster; without, the default, said so.
func TestGenerateReadsTheRuntimeOverhead(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{})
	class := runtimeclass.ClassName(runtimeclass.Sim, version.Get().Version)
	_, err := kubernetes.NewForConfigOrDie(cfg).NodeV1().RuntimeClasses().Create(context.Background(), &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Handler: "cloister-sim",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfig(t, cfg)
	host := registryWith(t, "web", "initializer")
	generateWith := func(extra ...string) (string, error) {
		file := filepath.Join(t.TempDir(), "shop.yaml")
		if err := os.WriteFile(file, []byte(strings.ReplaceAll(shopYAML, "REGISTRY", host)), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"generate", "--reference-values", "sim", "--cas-sim-key", casSimKeyFile(t), "--workspace", t.TempDir(),
			"--initializer-image", host + "/initializer:v1", file}, extra...)
		_, stderr, err := run(t, args...)
		return stderr, err
	}
	stderr, err := generateWith("--kubeconfig", kubeconfig)
	if err != nil || !strings.Contains(stderr, "VM memory 576Mi") || strings.Contains(stderr, "the default") {
		t.Errorf("with the cluster: %v\n%s", err, stderr)
	}
	stderr, err = generateWith()
	if err != nil || !strings.Contains(stderr, "VM memory 320Mi") || !strings.Contains(stderr, "a runtime overhead of 256Mi per pod, the default") {
		t.Errorf("without the cluster: %v\n%s", err, stderr)
	}
	if stderr, err = generateWith("--kubeconfig", kubeconfig, "--runtime-overhead", "1Gi"); err != nil || !strings.Contains(stderr, "VM memory 1088Mi") {
		t.Errorf("given: %v\n%s", err, stderr)
	}
	if _, err := generateWith("--kubeconfig", kubeconfig, "--runtime-class", "other"); err == nil || !strings.Contains(err.Error(), "RuntimeClass other") {
		t.Errorf("a RuntimeClass not installed: %v", err)
	}
}
