package install

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/internal/dev/cluster/devinfo"
)

// An install on the dev cluster takes the real node's folders and keeps the
// operator on it, under what the user sets; the same values make the check.
func TestDevClusterValues(t *testing.T) {
	info := devinfo.Info{RealNode: "real", DevDir: "/c/nodes/x/dev", KubeletDir: "/c/nodes/x/kubelet", AESMDir: "/c/nodes/x/aesmd", SysDir: "/c/nodes/x/sys"}
	got := mergeValues(info.Values(), map[string]any{"host": map[string]any{"kubeletDir": "/mine"}, "replicas": 1})
	want := map[string]any{
		"host":         map[string]any{"devDir": "/c/nodes/x/dev", "kubeletDir": "/mine", "aesmDir": "/c/nodes/x/aesmd", "sysDir": "/c/nodes/x/sys"},
		"nodeSelector": map[string]any{"cloister.dev/real-node": "true"},
		"replicas":     1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged values %v, want %v", got, want)
	}
	if in := (&Installer{}); in.want(&info).NodeSelector["cloister.dev/real-node"] != "true" || in.want(nil).NodeSelector != nil ||
		in.want(&devinfo.Info{}).NodeSelector != nil {
		t.Error("the check's node selector does not follow the dev cluster's real node")
	}
}

// Against a real API server: no ConfigMap, not a dev cluster; a dev
// cluster without a real node is refused before anything is written, and
// its check says why; a ConfigMap with a relative folder is refused.
func TestReadDevCluster(t *testing.T) {
	ctx := context.Background()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(envConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := ReadDevCluster(ctx, c); err != nil || info != nil {
		t.Fatalf("no ConfigMap: %v %v, want not a dev cluster", info, err)
	}
	cm := devinfo.Info{}.ConfigMap()
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, cm) })
	in := &Installer{Client: c, Releases: noReleases{}, Want: Want{Namespace: "cloister-system-dev"}}
	if _, err := in.Reconcile(ctx, false); !errors.Is(err, devinfo.ErrNoRealNode) {
		t.Fatalf("reconcile without a real node: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "cloister-system-dev"}, &corev1.Namespace{}); err == nil {
		t.Error("the refused reconcile created the namespace")
	}
	ps, err := in.Check(ctx)
	if err != nil || len(ps) == 0 || ps[0].Message != devinfo.ErrNoRealNode.Error() {
		t.Errorf("check without a real node: %v %v", ps, err)
	}

	cm.Data = devinfo.Info{RealNode: "real", DevDir: "dev", KubeletDir: "/k"}.ConfigMap().Data
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDevCluster(ctx, c); err == nil || !strings.Contains(err.Error(), `hostDevDir "dev" is not a clean absolute path`) {
		t.Errorf("a relative folder: %v", err)
	}
	cm.Data = devinfo.Info{RealNode: "real", DevDir: "/d", KubeletDir: "/k"}.ConfigMap().Data
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if info, err := ReadDevCluster(ctx, c); err != nil || *info != (devinfo.Info{RealNode: "real", DevDir: "/d", KubeletDir: "/k"}) {
		t.Errorf("read back %+v %v", info, err)
	}
}

type noReleases struct{ Releases }

func (noReleases) Latest(string, string) (string, error) { return "", nil }
