//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
)

// NitroPlugin CR -> the real plugin pod registers with the kubelet for the
// node's fake /dev/nitro_enclaves, labels the node cloister.dev/nitro=true
// and the node offers 4 enclaves: HEALTHY. The device removed -> the label
// and the capacity go, and the status counts no enclave; back -> both
// return. The plugin stays for the enclave pods of the next step.
func testNitroPluginFollowsTheDevice(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	plugin := &basev1beta1.NitroPlugin{
		ObjectMeta: metav1.ObjectMeta{Name: "real"},
		Spec: basev1beta1.NitroPluginSpec{ServiceSpec: common.ServiceSpec{
			ImagePullPolicy: corev1.PullIfNotPresent, NodeSelector: common.NodeSelector{cluster.LabelRealNode: "true"}}},
	}
	if err := e.crs.Create(ctx, plugin); err != nil {
		t.Fatal(err)
	}
	offers := func(want int64, label string) func(ctx context.Context) (bool, string, error) {
		return func(ctx context.Context) (bool, string, error) {
			n, err := e.cs.CoreV1().Nodes().Get(ctx, cluster.RealNodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			q := n.Status.Allocatable[tee.NitroEnclaves]
			return q.Value() == want && n.Labels[tee.LabelNitro] == label, "allocatable " + q.String() + ", label " + n.Labels[tee.LabelNitro], nil
		}
	}
	start := time.Now()
	waitState(t, e.crs, plugin, common.StateHealthy)
	waitFor(t, "the real node to offer 4 Nitro enclaves and carry the label", time.Minute, offers(4, "true"))
	waitFor(t, "the NitroPlugin to count them", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(plugin), plugin); err != nil {
			return false, err.Error(), nil
		}
		return plugin.Status.CapacityDevicesPerNode[cluster.RealNodeName] == 4 && plugin.Status.ReadyReplicas == 1, fmt.Sprintf("%+v", plugin.Status), nil
	})
	t.Logf("NitroPlugin HEALTHY, node labelled with 4 enclaves, in %s", time.Since(start).Round(time.Second))

	device := filepath.Join(e.node.DevicesDir(), "nitro_enclaves")
	if err := os.Rename(device, device+".gone"); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			_ = os.Rename(device+".gone", device)
		}
	}()
	start = time.Now()
	waitFor(t, "the label and the enclaves to go with the device", time.Minute, offers(0, ""))
	waitFor(t, "the NitroPlugin to count no enclave", time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(plugin), plugin); err != nil {
			return false, err.Error(), nil
		}
		return plugin.Status.CapacityDevices == 0, fmt.Sprintf("%+v", plugin.Status), nil
	})
	t.Logf("device removed: label and capacity gone in %s", time.Since(start).Round(time.Second))
	if err := os.Rename(device+".gone", device); err != nil {
		t.Fatal(err)
	}
	restored = true
	waitFor(t, "the label and the enclaves to come back", time.Minute, offers(4, "true"))
	waitState(t, e.crs, plugin, common.StateHealthy)
}
