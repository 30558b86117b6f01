package cas

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
)

// The operator reaches a CAS with replicas through any replica that
// answers: the first one gone, it attests the next.
func TestConnectorTriesEveryReplica(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, servicesv1beta1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(envConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "replicas-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	url, _, _ := castest.Start(t, dir, "none")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "replicas-real"}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	for i, running := range []bool{false, true} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: conn.PodNames("db", 2)[i]},
			Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "cas", Image: "cas"}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if running {
			pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.9.8.9"}
			if err := c.Status().Update(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	var dialled []string
	conns := &conn.Connector{Reader: c, Dial: func(addr string) casclient.DialFunc {
		dialled = append(dialled, addr)
		return conn.DialTo(strings.TrimPrefix(url, "https://"))
	}}
	cr := &servicesv1beta1.CAS{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "db"},
		Spec:   servicesv1beta1.CASSpec{Simulation: true, Replicas: 1, Service: servicesv1beta1.CASService{ClientPort: 8081}},
		Status: servicesv1beta1.CASStatus{SimulationKey: string(policy.MarshalPublicKey(castest.SimKey(t, dir)))}}
	if _, _, err := conns.Connect(ctx, cr); !errors.Is(err, conn.ErrNotRunning) {
		t.Errorf("one replica, not running: %v", err)
	}
	cr.Spec.Replicas = 2
	if _, att, err := conns.Connect(ctx, cr); err != nil || att.PublicKey == nil {
		t.Fatalf("two replicas, the second running: %v", err)
	}
	if len(dialled) != 1 || dialled[0] != "10.9.8.9:8081" {
		t.Errorf("dialled %v, want the running replica only", dialled)
	}
}
