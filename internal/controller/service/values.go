package service

import (
	"encoding/json"
	"fmt"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
)

// CommonValues are the chart values of the configuration every service CR
// has (seed 000, "Common Configuration"): image (defaultImage when unset),
// imagePullPolicy, imagePullSecrets, resources, nodeSelector, podAnnotations.
// Values are plain JSON types, as Helm stores and compares them.
func CommonValues(spec *common.ServiceSpec, defaultImage string) (map[string]any, error) {
	image := spec.Image
	if image == "" {
		image = defaultImage
	}
	values := map[string]any{"image": image}
	if spec.ImagePullPolicy != "" {
		values["imagePullPolicy"] = string(spec.ImagePullPolicy)
	}
	for key, v := range map[string]any{
		"imagePullSecrets": spec.ImagePullSecrets,
		"resources":        spec.Resources,
		"nodeSelector":     spec.NodeSelector,
		"podAnnotations":   spec.PodAnnotations,
	} {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", key, err)
		}
		var plain any
		if err := json.Unmarshal(data, &plain); err != nil {
			return nil, fmt.Errorf("encoding %s: %w", key, err)
		}
		if plain != nil {
			values[key] = plain
		}
	}
	return values, nil
}

// NamespacedValues is the release namespace and common values of a service
// whose spec names the namespace it runs in (seed 000's `namespace` field of
// LAS and SGXPlugin): unset means the operator's namespace.
func NamespacedValues(spec *common.ServiceSpec, namespace, operatorNamespace, defaultImage string) (string, map[string]any, error) {
	if namespace == "" {
		namespace = operatorNamespace
	}
	values, err := CommonValues(spec, defaultImage)
	if err != nil {
		return "", nil, err
	}
	return namespace, values, nil
}

// Base is what every Kind adapter holds; adapters embed it.
type Base struct {
	// Reader reads nodes, pods and other cached objects the kind's
	// metrics come from (the manager's cache).
	Reader       client.Reader
	ChartData    *chart.Chart
	DefaultImage string
}

// Chart is the kind's embedded chart.
func (b *Base) Chart() *chart.Chart { return b.ChartData }
