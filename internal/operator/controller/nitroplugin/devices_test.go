package nitroplugin

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

func node(name string, enclaves, cpus int64) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{}}}
	if enclaves > 0 {
		n.Labels[tee.LabelNitro] = "true"
		n.Status.Allocatable[tee.NitroEnclaves] = *resource.NewQuantity(enclaves, resource.DecimalSI)
	}
	if cpus > 0 {
		n.Status.Allocatable[tee.NitroCPUs] = *resource.NewQuantity(cpus, resource.DecimalSI)
	}
	return n
}

func pod(name, nodeName, image string, enclaves int64) corev1.Pod {
	c := corev1.Container{Name: "c", Image: image}
	if enclaves > 0 {
		c.Resources.Requests = corev1.ResourceList{tee.NitroEnclaves: *resource.NewQuantity(enclaves, resource.DecimalSI)}
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{c}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func TestDevices(t *testing.T) {
	ds := &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberReady: 2}}
	nodes := []corev1.Node{node("nitro-a", 4, 2), node("nitro-b", 4, 0), node("plain", 0, 0)}
	pods := []corev1.Pod{pod("enclave", "nitro-a", "r/app:v1", 1)}

	st, obs := Devices(nodes, pods, ds)
	if obs.Status != health.True || obs.Reason != health.ReasonNoAlerts || st.CapacityDevices != 8 || st.UsedDevices != 1 ||
		st.AvailableDevices != 7 || st.CapacityCPUs != 2 || len(st.AWSPluginNodes) != 0 || st.CapacityDevicesPerNode["plain"] != 0 {
		t.Errorf("without AWS's plugin: %+v, %v", st, obs)
	}

	// AWS's plugin on nitro-b: left out of the counts, named, unhealthy.
	withAWS := append(slices.Clone(pods), pod("aws", "nitro-b", "public.ecr.aws/aws-nitro-enclaves/aws-nitro-enclaves-k8s-device-plugin:v0.3", 0))
	st, obs = Devices(nodes, withAWS, ds)
	if obs.Status != health.False || obs.Reason != health.ReasonNitroAWSPluginConflict || !strings.Contains(obs.Message, "runs on nitro-b") ||
		st.CapacityDevices != 4 || !slices.Equal(st.AWSPluginNodes, []string{"nitro-b"}) {
		t.Errorf("with AWS's plugin: %+v, %v", st, obs)
	}
	// A finished pod of it, or one on an unselected node, is no conflict.
	done := pod("aws-done", "nitro-b", "aws-nitro-enclaves-k8s-device-plugin@sha256:ab", 0)
	done.Status.Phase = corev1.PodSucceeded
	if st, _ := Devices(nodes, append(slices.Clone(pods), done, pod("aws-elsewhere", "other", "aws-nitro-enclaves-k8s-device-plugin", 0)), ds); len(st.AWSPluginNodes) != 0 {
		t.Errorf("conflict from a finished or unselected pod: %v", st.AWSPluginNodes)
	}

	// Every enclave of nitro-a in use: the device alert names it.
	full := []corev1.Pod{pod("big", "nitro-a", "r/app:v1", 4)}
	if st, obs := Devices(nodes, full, ds); obs.Reason != health.ReasonNitroDeviceAlert || st.NitroDeviceAlert != 1 || !strings.Contains(obs.Message, "nitro-a") {
		t.Errorf("full node: %+v, %v", st, obs)
	}
	// No DaemonSet yet: unknown.
	if _, obs := Devices(nodes, pods, nil); obs.Status != health.Unknown || obs.Reason != health.ReasonPluginNotDeployed {
		t.Errorf("no DaemonSet: %v", obs)
	}
}

func TestIsAWSPlugin(t *testing.T) {
	for image, want := range map[string]bool{
		"public.ecr.aws/aws-nitro-enclaves/aws-nitro-enclaves-k8s-device-plugin:v0.3": true,
		"aws-nitro-enclaves-k8s-device-plugin@sha256:00":                              true,
		"registry:5000/aws-nitro-enclaves-k8s-device-plugin":                          true,
		"ghcr.io/cloister-cc/cloister-device-plugin:v1":                               false,
		"example/aws-nitro-enclaves-k8s-device-plugin-fork:v1":                        false,
	} {
		p := pod("p", "n", image, 0)
		if got := IsAWSPlugin(&p); got != want {
			t.Errorf("%s: %v, want %v", image, got, want)
		}
	}
}

// The release stays off the nodes the status found AWS's plugin on.
func TestReleaseExcludesAWSNodes(t *testing.T) {
	k := New(service.Base{})
	p := &basev1beta1.NitroPlugin{ObjectMeta: metav1.ObjectMeta{Name: "nitro"}, Spec: basev1beta1.NitroPluginSpec{Enclaves: 2, EnclaveCPUs: true}}
	p.Status.AWSPluginNodes = []string{"nitro-b"}
	ns, values, err := k.Release(p, "cloister-system")
	if err != nil || ns != "cloister-system" || values["enclaves"] != int64(2) || values["enclaveCPUs"] != true {
		t.Fatalf("%s %v %v", ns, values, err)
	}
	if ex, _ := values["excludeNodes"].([]any); len(ex) != 1 || ex[0] != "nitro-b" {
		t.Errorf("excludeNodes %v", values["excludeNodes"])
	}
}
