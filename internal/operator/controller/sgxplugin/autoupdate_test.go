package sgxplugin

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/autoupdate"
	"github.com/cloister-cc/cloister/internal/operator/controller/controllertest"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/workload/imagesig"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

// An SGXPlugin with autoUpdate follows a newer tag of its image's line in
// the registry: its DaemonSet, rolling one node at a time, is given the
// new image by digest.
func TestAutoUpdateRollsTheSGXPlugin(t *testing.T) {
	e := controllertest.New(t, envConfig, "sgx-autoupdate", appsv1.AddToScheme, rbacv1.AddToScheme, basev1beta1.AddToScheme)
	data, err := charts.Load("sgxplugin")
	if err != nil {
		t.Fatal(err)
	}
	r := &service.Reconciler{Client: e.Client, Reader: e.Client, Scheme: e.Scheme, Releases: e.Releases, Recorder: e.Events,
		Metrics: metrics.NewRecorder(prometheus.NewRegistry()), OperatorNamespace: e.Namespace,
		Kind: New(service.Base{Reader: e.Client, ChartData: data, DefaultImage: "example.com/cloister-device-plugin:v9"})}
	host, tr := testenv.TLSRegistry(t, nil)
	key, err := imagesig.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	// The key the operator was installed with: it takes only what it
	// signed.
	r.Images, r.ImageKey = &autoupdate.Resolver{Transport: tr}, &key.PublicKey
	push := func(tag string) string {
		img, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := name.NewTag(host + "/cloister-device-plugin:" + tag)
		if err := remote.Write(ref, img, remote.WithTransport(tr)); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		signed, _ := name.NewDigest(host + "/cloister-device-plugin@" + d.String())
		if err := imagesig.Sign(context.Background(), signed, key, remote.WithTransport(tr)); err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	push("v1.4.0")
	plugin := &basev1beta1.SGXPlugin{ObjectMeta: metav1.ObjectMeta{Name: "auto"},
		Spec: basev1beta1.SGXPluginSpec{ServiceSpec: common.ServiceSpec{Image: host + "/cloister-device-plugin:v1.4.0", AutoUpdate: true}}}
	if err := e.Client.Create(e.Ctx, plugin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), plugin) })
	image := func() (string, *appsv1.DaemonSet) {
		var ds appsv1.DaemonSet
		if err := e.Client.Get(e.Ctx, client.ObjectKey{Namespace: e.Namespace, Name: "sgx-auto"}, &ds); err != nil {
			return err.Error(), nil
		}
		return ds.Spec.Template.Spec.Containers[0].Image, &ds
	}
	wait := func(want string) *appsv1.DaemonSet {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			_, _ = r.Reconcile(e.Ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(plugin)})
			if got, ds := image(); got == want {
				return ds
			}
		}
		got, _ := image()
		t.Fatalf("the DaemonSet runs %s, want %s", got, want)
		return nil
	}
	// Nothing newer yet: the spec's image as given.
	before := wait(host + "/cloister-device-plugin:v1.4.0")
	newer := push("v1.4.1")
	push("v1.5.0") // another line
	r.AutoUpdateInterval = time.Nanosecond
	after := wait(host + "/cloister-device-plugin:v1.4.1@" + newer)
	if after.Generation <= before.Generation || after.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Errorf("generation %d -> %d, strategy %s: no rolling update", before.Generation, after.Generation, after.Spec.UpdateStrategy.Type)
	}
	if err := e.Client.Get(e.Ctx, client.ObjectKeyFromObject(plugin), plugin); err != nil {
		t.Fatal(err)
	}
	if au := plugin.Status.AutoUpdate; au == nil || au.Image != host+"/cloister-device-plugin:v1.4.1@"+newer || au.Source != host+"/cloister-device-plugin" {
		t.Errorf("status.autoUpdate %+v", au)
	}
	if !strings.Contains(strings.Join(e.Events.Reasons(), " "), "AutoUpdated") {
		t.Errorf("events %v", e.Events.Reasons())
	}
}
