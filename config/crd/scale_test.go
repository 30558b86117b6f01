package crd

import (
	"context"
	"encoding/json"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// A NitroEnclaveDeployment scales as kubectl scale and an HPA do: through
// the scale subresource, which reports the status's replicas and pod
// selector and writes spec.replicas.
func TestNitroEnclaveDeploymentScales(t *testing.T) {
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(cfg)
	ned, err := create(t, dyn, `{apiVersion: enclave.cloister.dev/v1beta1, kind: NitroEnclaveDeployment, metadata: {name: scaled, namespace: default},
		spec: {userPlugins: [{name: a, image: x}]}}`)
	if err != nil {
		t.Fatal(err)
	}
	ri := dyn.Resource(resourceOf(ned)).Namespace("default")
	if err := unstructured.SetNestedField(ned.Object, int64(1), "status", "replicas"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(ned.Object, "app.kubernetes.io/instance=ned-scaled", "status", "selector"); err != nil {
		t.Fatal(err)
	}
	if _, err = ri.UpdateStatus(ctx, ned, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var scale autoscalingv1.Scale
	if err := kubernetes.NewForConfigOrDie(cfg).RESTClient().Get().AbsPath("/apis/enclave.cloister.dev/v1beta1/namespaces/default/nitroenclavedeployments/scaled/scale").
		Do(ctx).Into(&scale); err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 1 || scale.Status.Replicas != 1 || scale.Status.Selector != "app.kubernetes.io/instance=ned-scaled" {
		t.Errorf("scale %+v", scale)
	}
	scale.Spec.Replicas = 3
	scale.APIVersion, scale.Kind = "autoscaling/v1", "Scale"
	body, _ := json.Marshal(&scale)
	if err := kubernetes.NewForConfigOrDie(cfg).RESTClient().Put().AbsPath("/apis/enclave.cloister.dev/v1beta1/namespaces/default/nitroenclavedeployments/scaled/scale").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	got, err := ri.Get(ctx, "scaled", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas"); r != 3 {
		t.Errorf("spec.replicas %d after scaling to 3", r)
	}
}
