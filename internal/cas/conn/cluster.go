package conn

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
)

// Cluster is a CAS resource reached from outside the cluster, through its
// API server: what the CLI's --cluster names.
type Cluster struct {
	Config *rest.Config
	Ref    Ref
}

// InitToken reads the one-time init token from the Secret the operator
// made for the CAS resource: reading it is what entitles the caller to
// initialise CAS.
func (c Cluster) InitToken(ctx context.Context) (string, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return "", err
	}
	name := InitTokenSecret(c.Ref.Name)
	sec, err := cs.CoreV1().Secrets(c.Ref.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading CAS's init token (Secret %s/%s; reading it is what entitles you to initialise CAS): %w", c.Ref.Namespace, name, err)
	}
	token := strings.TrimSpace(string(sec.Data[InitTokenKey]))
	if token == "" {
		return "", fmt.Errorf("the init token Secret %s/%s holds no token: the operator has not made it yet, or it was used when CAS was initialised and is never made again "+
			"(after a loss, CAS's recovery owners sign an init of a new CAS)", c.Ref.Namespace, name)
	}
	return token, nil
}

// Replicas reads the CAS resource and names its running replicas, ready
// ones first: one that died, or is being replaced, does not stop a caller
// that tries them in turn. The Ref's port becomes the resource's client
// port.
func (c *Cluster) Replicas(ctx context.Context) (*servicesv1beta1.CAS, []string, error) {
	scheme, err := SchemeWith(servicesv1beta1.AddToScheme, corev1.AddToScheme)
	if err != nil {
		return nil, nil, err
	}
	kc, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, err
	}
	cas := &servicesv1beta1.CAS{}
	if err := kc.Get(ctx, client.ObjectKey{Namespace: c.Ref.Namespace, Name: c.Ref.Name}, cas); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", c.Ref, err)
	}
	c.Ref.Port = int(cas.Spec.Service.ClientPort)
	pods, err := ReplicasInOrder(ctx, kc, c.Ref.Namespace, PodNames(c.Ref.Name, cas.Spec.Replicas))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", c.Ref, err)
	}
	return cas, pods, nil
}

// Forward port-forwards to the first of pods that takes it. The URL keeps
// the Service's name, which CAS's certificate names; stop ends the
// forward.
func (c Cluster) Forward(ctx context.Context, pods []string) (url string, dial casclient.DialFunc, stop func(), err error) {
	var errs []error
	for _, pod := range pods {
		dial, stop, err := PortForward(ctx, c.Config, c.Ref.Namespace, pod)
		if err == nil {
			return c.Ref.URL(), dial, stop, nil
		}
		errs = append(errs, err)
	}
	return "", nil, nil, fmt.Errorf("%s: %w", c.Ref, errors.Join(errs...))
}

// SchemeWith is a scheme of the given API groups.
func SchemeWith(adds ...func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range adds {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
