package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

// The default CRs are created against a real API server; while the
// operator's webhook cannot be called (the API server's error for it is an
// internal error) install tries again instead of failing, and any other
// refusal fails at once.
func TestDefaultsWaitForTheWebhook(t *testing.T) {
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	real, err := client.NewWithWatch(envConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	webhookDown := errors.New(`failed calling webhook "sgxplugins.validate.cloister.dev": context deadline exceeded`)
	failures := 2
	c := interceptor.NewClient(real, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if failures > 0 {
				failures--
				return apierrors.NewInternalError(webhookDown)
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	var said []string
	in := &Installer{Client: c, Poll: 10 * time.Millisecond, Timeout: 10 * time.Second,
		Progress: func(format string, args ...any) { said = append(said, format) }}
	if err := in.createDefaults(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if err := real.Get(context.Background(), client.ObjectKey{Name: DefaultSGXPlugin}, &basev1beta1.SGXPlugin{}); err != nil {
		t.Errorf("the SGXPlugin after the webhook answered: %v", err)
	}
	if len(said) < 2 || !strings.Contains(said[0], "cannot reach the operator's webhook") {
		t.Errorf("progress %q", said)
	}

	refused := interceptor.NewClient(real, interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			failures++
			return apierrors.NewForbidden(basev1beta1.GroupVersion.WithResource("las").GroupResource(), "las", errors.New("no"))
		},
	})
	failures = 0
	in.Client = refused
	if err := in.createDefaults(context.Background(), false); err == nil || failures != 1 {
		t.Errorf("a refusal: %v after %d tries, want an error at once", err, failures)
	}
}

// The default LAS runs in simulation on a dev cluster (no SGX quoting
// there: without simulation it could never be HEALTHY), and never
// elsewhere.
func TestDefaultLASSimulatesOnlyOnDevClusters(t *testing.T) {
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(envConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, dev := range []bool{false, true} {
		_ = c.Delete(ctx, &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: DefaultLAS}})
		var said []string
		in := &Installer{Client: c, Want: Want{NoSGXPlugin: true}, Progress: func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) }}
		if err := in.createDefaults(ctx, dev); err != nil {
			t.Fatal(err)
		}
		var las basev1beta1.LAS
		if err := c.Get(ctx, client.ObjectKey{Name: DefaultLAS}, &las); err != nil {
			t.Fatal(err)
		}
		if las.Spec.Simulation != dev || strings.Contains(strings.Join(said, "\n"), "insecure") != dev {
			t.Errorf("dev cluster %v: simulation %v, said %q", dev, las.Spec.Simulation, said)
		}
	}
}
