package cas

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/store"
	"github.com/cloister-cc/cloister/internal/cas/store/kubestore"
)

// kubernetesStore prefixes --store for the Kubernetes API.
const kubernetesStore = "kubernetes:"

// kubeAPI is how a CAS on a kubernetes store reaches the API: its own
// state, and the endpoints of its Service (its ready peers).
type kubeAPI struct {
	c  client.WithWatch
	ns string
}

// openStore opens the state --store names; a Kubernetes store takes in
// other replicas' changes until ctx ends.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (store.Store, *kubeAPI, error) {
	if cfg.Store == "" || cfg.Store == "bolt" {
		s, err := store.OpenBolt(cfg.StateDir)
		if err != nil {
			// Not s: a nil *Bolt is a store that is not nil.
			return nil, nil, err
		}
		return s, nil, nil
	}
	ns, name, err := parseKubeStore(cfg.Store)
	if err != nil {
		return nil, nil, err
	}
	c, err := kubeClient(cfg.KubeConfig)
	if err != nil {
		return nil, nil, fmt.Errorf("--store %s: %w", cfg.Store, err)
	}
	s, err := kubestore.Open(ctx, c, kubestore.Options{Namespace: ns, CAS: name, Log: log})
	if err != nil {
		return nil, nil, err
	}
	go s.Watch(ctx, 0)
	log.Info("CAS's state is on the Kubernetes API, shared by its replicas", "namespace", ns, "cas", name, "generation", s.Generation())
	return s, &kubeAPI{c: c, ns: ns}, nil
}

// parseKubeStore reads --store kubernetes:NAMESPACE/NAME.
func parseKubeStore(flag string) (ns, name string, err error) {
	ref, ok := strings.CutPrefix(flag, kubernetesStore)
	ns, name, okName := strings.Cut(ref, "/")
	if !ok || !okName || ns == "" || name == "" {
		return "", "", fmt.Errorf("--store %q: use bolt (the state in --state-dir) or kubernetes:NAMESPACE/NAME (on the Kubernetes API, shared by the replicas of the CAS resource NAME)", flag)
	}
	return ns, name, nil
}

// kubeClient reaches the API with rc, or nil the pod's service account.
func kubeClient(rc *rest.Config) (client.WithWatch, error) {
	if rc == nil {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("the pod's service account: %w", err)
		}
	}
	scheme := runtime.NewScheme()
	if err := servicesv1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := discoveryv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.NewWithWatch(rc, client.Options{Scheme: scheme})
}

// endpointPeers lists the ready endpoints of service but this pod (self):
// a replica is ready only once it holds the seed.
func (k *kubeAPI) endpointPeers(service, self string) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		var slices discoveryv1.EndpointSliceList
		if err := k.c.List(ctx, &slices, client.InNamespace(k.ns), client.MatchingLabels{discoveryv1.LabelServiceName: service}); err != nil {
			return nil, err
		}
		var out []string
		for _, sl := range slices.Items {
			port := int32(8081)
			for _, p := range sl.Ports {
				if p.Port != nil {
					port = *p.Port
					break
				}
			}
			for _, ep := range sl.Endpoints {
				if ep.Conditions.Ready != nil && !*ep.Conditions.Ready || ep.TargetRef != nil && ep.TargetRef.Name == self {
					continue
				}
				for _, a := range ep.Addresses {
					out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
				}
			}
		}
		return out, nil
	}
}
