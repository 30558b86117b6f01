package cas

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/store/kubestore"
)

// kubernetesStore prefixes --store for the Kubernetes API.
const kubernetesStore = "kubernetes:"

// openStore opens the state --store names; a Kubernetes store takes in
// other replicas' changes until ctx ends.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, error) {
	if cfg.Store == "" || cfg.Store == "bolt" {
		return store.OpenBolt(cfg.StateDir)
	}
	ref, ok := strings.CutPrefix(cfg.Store, kubernetesStore)
	ns, name, okName := strings.Cut(ref, "/")
	if !ok || !okName || ns == "" || name == "" {
		return nil, fmt.Errorf("--store %q: use bolt (the state in --state-dir) or kubernetes:NAMESPACE/NAME (on the Kubernetes API, shared by the replicas of the CAS resource NAME)", cfg.Store)
	}
	rc := cfg.KubeConfig
	if rc == nil {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("--store %s: the pod's service account: %w", cfg.Store, err)
		}
	}
	scheme := runtime.NewScheme()
	if err := servicesv1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(rc, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("--store %s: %w", cfg.Store, err)
	}
	s, err := kubestore.Open(ctx, c, kubestore.Options{Namespace: ns, CAS: name, Log: log})
	if err != nil {
		return nil, err
	}
	go s.Watch(ctx, 0)
	log.Info("CAS's state is on the Kubernetes API, shared by its replicas", "namespace", ns, "cas", name, "generation", s.Generation())
	return s, nil
}
