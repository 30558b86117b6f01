// Package kubeconfig finds the cluster a command talks to, as kubectl
// finds it: a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)
// and one of its contexts.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig is the cluster of the kubeconfig file path (empty: the
// default) in its context kubeContext (empty: the current one).
func RESTConfig(path, kubeContext string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("finding the cluster: %w", err)
	}
	return cfg, nil
}
