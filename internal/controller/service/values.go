package service

import (
	"encoding/json"
	"fmt"

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
