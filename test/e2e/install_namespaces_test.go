//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/api/common"
	enclavev1beta1 "github.com/cloister-cc/cloister/api/enclave/v1beta1"
)

// The installed operator, bounded by the chart's admission policies,
// deploys a NitroEnclaveDeployment only once an administrator marked its
// namespace (cloister install -c NS): before, its status names the label.
func testInstalledOperatorDeploysWhereMarked(t *testing.T, e *realNodeEnv, in *installer) {
	ctx := context.Background()
	c := e.crs
	const ns = "unmarked"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	var ned enclavev1beta1.NitroEnclaveDeployment
	readSample(t, "enclave_v1beta1_nitroenclavedeployment.yaml", &ned)
	ned.Namespace = ns
	if err := c.Create(ctx, &ned); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), &ned) })
	waitFor(t, "the refusal in the NitroEnclaveDeployment's status", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		var got enclavev1beta1.NitroEnclaveDeployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(&ned), &got); err != nil {
			return false, "", err
		}
		for _, cond := range got.Status.Conditions {
			if strings.Contains(cond.Message, common.LabelManagedNamespace+"=true") {
				return true, "", nil
			}
		}
		return false, fmt.Sprint(got.Status.Status, got.Status.Conditions), nil
	})
	var none appsv1.DeploymentList
	if err := c.List(ctx, &none, client.InNamespace(ns)); err != nil || len(none.Items) != 0 {
		t.Fatalf("Deployments in an unmarked namespace: %d %v", len(none.Items), err)
	}
	in.wantWell(t, "-c", ns)
	waitFor(t, "the enclave pods' Deployment in the marked namespace", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		var d appsv1.Deployment
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ned-" + ned.Name}, &d)
		return err == nil && d.Labels[common.LabelManagedBy] == common.ManagedByOperator, fmt.Sprint(err, d.Labels), nil
	})
}

// readSample decodes one of config/samples into obj.
func readSample(t *testing.T, name string, obj any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "config/samples", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, obj); err != nil {
		t.Fatal(err)
	}
}
