package service

import (
	"testing"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
)

// pinnedKind is testKind for a service whose release follows only its
// CR's spec, with the operator's default image in Base.DefaultImage.
type pinnedKind struct{ testKind }

func (k *pinnedKind) Release(obj Object, operatorNamespace string) (string, map[string]any, error) {
	l := obj.(*basev1beta1.LAS)
	return NamespacedValues(&l.Spec.ServiceSpec, l.Spec.Namespace, operatorNamespace, k.DefaultImage)
}

func (k *pinnedKind) Carry(obj Object, deployed, values map[string]any) {
	if obj.(*basev1beta1.LAS).Spec.Image == "" {
		values["image"] = deployed["image"]
	}
}

// A new operator (another default image, another chart) leaves a pinned
// release as deployed; drift is repaired to the deployed revision; a spec
// change renders the new chart but keeps the image an empty spec.image
// resolved to; only spec.image moves the image.
func TestPinnedReleaseFollowsOnlyItsSpec(t *testing.T) {
	f := newFixture(t, "pinned")
	kind := &pinnedKind{testKind{Base{ChartData: testChart(), DefaultImage: "example.com/test:1"}}}
	f.r.Kind = kind
	cr := f.newCR("pinned")
	f.converge(cr)
	if rel := f.releaseOf(cr); rel.Version != 1 || f.owned(cr).Data["image"] != "example.com/test:1" {
		t.Fatalf("installed revision %d runs %q", rel.Version, f.owned(cr).Data["image"])
	}

	// The operator is upgraded: a new default image and a chart that
	// renders the ConfigMap differently.
	newChart := testChart()
	newChart.Templates = append(newChart.Templates, &chartcommon.File{Name: "templates/extra.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-extra
  namespace: {{ .Release.Namespace }}
`)})
	kind.ChartData, kind.DefaultImage = newChart, "example.com/test:9"
	for range 3 {
		f.reconcile(cr)
	}
	f.converge(cr)
	if rel := f.releaseOf(cr); rel.Version != 1 || f.owned(cr).Data["image"] != "example.com/test:1" {
		t.Fatalf("the operator upgrade changed the release: revision %d runs %q", rel.Version, f.owned(cr).Data["image"])
	}

	// Drift goes back to the deployed revision, not to the new chart.
	cm := f.owned(cr)
	mustPatch(t, f.client, cm, `{"data":{"image":"evil.example/x:1"}}`)
	f.converge(cr)
	if img := f.owned(cr).Data["image"]; img != "example.com/test:1" {
		t.Fatalf("drift repaired to %q", img)
	}
	if rel := f.releaseOf(cr); len(rel.Chart.Templates) != len(testChart().Templates) {
		t.Fatalf("drift repair deployed the new chart (%d templates)", len(rel.Chart.Templates))
	}

	// A spec change takes the new chart, and keeps the image.
	mustPatch(t, f.client, cr, `{"spec":{"nodeSelector":{"zone":"a"}}}`)
	f.converge(cr)
	rel := f.releaseOf(cr)
	if len(rel.Chart.Templates) != len(newChart.Templates) || f.owned(cr).Data["image"] != "example.com/test:1" {
		t.Fatalf("after a spec change: %d templates, image %q; want the new chart and the kept image", len(rel.Chart.Templates), f.owned(cr).Data["image"])
	}

	// spec.image moves it.
	mustPatch(t, f.client, cr, `{"spec":{"image":"example.com/test:9"}}`)
	f.converge(cr)
	if img := f.owned(cr).Data["image"]; img != "example.com/test:9" {
		t.Fatalf("spec.image runs %q", img)
	}
}
