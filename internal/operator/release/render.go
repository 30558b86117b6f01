package release

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/cloister-cc/cloister/internal/base/version"
)

// renderKubeVersion is the cluster version charts are rendered for when
// nothing is asked of the cluster: the release Cloister is built against.
var renderKubeVersion = func() *common.KubeVersion {
	v, err := common.ParseKubeVersion(version.Kubernetes)
	if err != nil {
		panic(fmt.Sprintf("version.Kubernetes %q: %v", version.Kubernetes, err))
	}
	return v
}()

// Render returns the objects the release should contain, exactly as Install
// or Upgrade would apply them (post-rendered with owner and labels), without
// touching the cluster.
func (m *Manager) Render(req Request) ([]*unstructured.Unstructured, error) {
	in := action.NewInstall(action.NewConfiguration(action.ConfigurationSetLogger(m.log.Handler())))
	in.ReleaseName, in.Namespace = req.Name, req.Namespace
	in.DryRunStrategy = action.DryRunClient
	in.KubeVersion = renderKubeVersion
	in.Replace = true
	in.PostRenderer = ownership{owner: req.Owner, labels: req.Labels, transform: req.Transform}
	r, err := in.Run(req.Chart, req.Values)
	if err != nil {
		return nil, fmt.Errorf("rendering release %s/%s: %w", req.Namespace, req.Name, err)
	}
	rel, ok := r.(*helmrelease.Release)
	if !ok {
		return nil, fmt.Errorf("rendering release %s: unexpected type %T", req.Name, r)
	}
	objs, err := parseManifestIn(rel.Manifest, req.Namespace)
	if err != nil {
		return nil, fmt.Errorf("rendering release %s/%s: %w", req.Namespace, req.Name, err)
	}
	return objs, nil
}

// parseManifestIn parses a release manifest whose namespaced objects
// without a namespace belong to namespace ns.
func parseManifestIn(manifest, ns string) ([]*unstructured.Unstructured, error) {
	objs, err := parseManifest(manifest)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GetNamespace() == "" && namespaced(o) {
			o.SetNamespace(ns)
		}
	}
	return objs, nil
}

// clusterScopedKinds are the cluster-scoped kinds charts may contain.
var clusterScopedKinds = map[string]bool{
	"ClusterRole": true, "ClusterRoleBinding": true, "Namespace": true, "PriorityClass": true,
	"RuntimeClass": true, "CustomResourceDefinition": true, "ValidatingWebhookConfiguration": true,
	"MutatingWebhookConfiguration": true, "StorageClass": true,
}

func namespaced(o *unstructured.Unstructured) bool { return !clusterScopedKinds[o.GetKind()] }

// parseManifest splits a multi-document manifest into objects.
func parseManifest(manifest string) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewBufferString(manifest)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading manifest: %w", err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("parsing manifest: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
}

// ownership is a Helm post-renderer that makes the CR the only (controller)
// owner of every object and adds the operator's labels.
type ownership struct {
	owner     metav1.OwnerReference
	labels    map[string]string
	transform func(*unstructured.Unstructured) error
}

func (o ownership) Run(in *bytes.Buffer) (*bytes.Buffer, error) {
	objs, err := parseManifest(in.String())
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, obj := range objs {
		if o.owner.UID != "" {
			obj.SetOwnerReferences([]metav1.OwnerReference{o.owner})
		}
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		for k, v := range o.labels {
			labels[k] = v
		}
		obj.SetLabels(labels)
		// Pods of workloads carry the labels too, so the operator can map a
		// pod to its CR without parsing names.
		if tmpl, found, _ := unstructured.NestedMap(obj.Object, "spec", "template", "metadata"); found {
			podLabels, _, _ := unstructured.NestedStringMap(tmpl, "labels")
			if podLabels == nil {
				podLabels = map[string]string{}
			}
			for k, v := range o.labels {
				podLabels[k] = v
			}
			if err := unstructured.SetNestedStringMap(obj.Object, podLabels, "spec", "template", "metadata", "labels"); err != nil {
				return nil, err
			}
		}
		if o.transform != nil {
			if err := o.transform(obj); err != nil {
				return nil, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
		}
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(data)
	}
	return &out, nil
}
