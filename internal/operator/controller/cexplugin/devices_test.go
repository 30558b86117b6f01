package cexplugin

import (
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// Small builders, as cert-manager's tests use them.

func node(name, arch string, resources map[string]int64) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelArchStable: arch}}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	for r, v := range resources {
		n.Status.Allocatable[corev1.ResourceName(r)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return n
}

func pod(nodeName, res string, n int64, phase corev1.PodPhase) corev1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	return corev1.Pod{
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceName(res): q}, Limits: corev1.ResourceList{corev1.ResourceName(res): q}}}}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func daemonSet(desired, ready int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberReady: ready}}
}

func TestDevices(t *testing.T) {
	cluster := []corev1.Node{
		node("z-0", "s390x", map[string]int64{"ibm.com/cex-ep11": 8}),
		node("z-1", "s390x", map[string]int64{"ibm.com/cex-ep11-payments": 2, "ibm.com/cex-ep11-audit": 1, "ibm.com/cex-cca": 4}),
		node("x-2", "amd64", map[string]int64{"ibm.com/cex-ep11": 99}), // not IBM Z: ignored
	}
	tests := []struct {
		name                      string
		typ                       basev1beta1.CEXType
		nodes                     []corev1.Node
		pods                      []corev1.Pod
		ds                        *appsv1.DaemonSet
		capacity, used, available int32
		availablePerNode          map[string]int32
		deviceAlert, replicaAlert int32
		healthy, reason, message  string
	}{
		{"plain and config-set resources of the type count", basev1beta1.CEXTypeEP11, cluster, []corev1.Pod{
			pod("z-0", "ibm.com/cex-ep11", 1, corev1.PodRunning),
			pod("z-1", "ibm.com/cex-ep11-payments", 1, corev1.PodRunning),
			pod("z-1", "ibm.com/cex-cca", 1, corev1.PodRunning),
			pod("z-0", "ibm.com/cex-ep11", 1, corev1.PodSucceeded),
		}, daemonSet(2, 2), 11, 2, 9, map[string]int32{"z-0": 7, "z-1": 2}, 0, 0, "True", "NoAlerts", "9 ibm.com/cex-ep11 devices available on 2 nodes"},
		{"another type counts only its own", basev1beta1.CEXTypeCCA, cluster, nil, daemonSet(2, 2),
			4, 0, 4, map[string]int32{"z-0": 0, "z-1": 4}, 1, 0, "False", "CEXDeviceAlert", "cexDeviceAlert=1: no free ibm.com/cex-cca device on z-0"},
		{"a node whose APQNs are all taken", basev1beta1.CEXTypeEP11, cluster[:1], []corev1.Pod{
			pod("z-0", "ibm.com/cex-ep11", 8, corev1.PodRunning),
		}, daemonSet(1, 1), 8, 8, 0, map[string]int32{"z-0": 0}, 1, 0, "False", "CEXDeviceAlert", "no free ibm.com/cex-ep11 device on z-0"},
		{"plugin not ready everywhere", basev1beta1.CEXTypeEP11, cluster[:2], nil, daemonSet(2, 1),
			11, 0, 11, map[string]int32{"z-0": 8, "z-1": 3}, 0, 1, "False", "CEXReplicaAlert", "the plugin is not ready on 1 of 2 nodes"},
		{"no IBM Z node", basev1beta1.CEXTypeEP11, cluster[2:], nil, daemonSet(0, 0),
			0, 0, 0, map[string]int32{}, 0, 0, "True", "NoNodes", "no selected s390x node"},
		{"not deployed", basev1beta1.CEXTypeEP11, cluster[:1], nil, nil,
			8, 0, 8, map[string]int32{"z-0": 8}, 0, -1, "Unknown", "PluginNotDeployed", "DaemonSet does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, h := Devices(tt.typ, tt.nodes, tt.pods, tt.ds)
			if st.CapacityDevices != tt.capacity || st.UsedDevices != tt.used || st.AvailableDevices != tt.available {
				t.Errorf("capacity/used/available %d/%d/%d, want %d/%d/%d", st.CapacityDevices, st.UsedDevices, st.AvailableDevices, tt.capacity, tt.used, tt.available)
			}
			if !maps.Equal(st.AvailableDevicesPerNode, tt.availablePerNode) {
				t.Errorf("available per node %v, want %v", st.AvailableDevicesPerNode, tt.availablePerNode)
			}
			if st.CEXDeviceAlert != tt.deviceAlert || st.CEXReplicaAlert != tt.replicaAlert {
				t.Errorf("alerts %d/%d, want %d/%d", st.CEXDeviceAlert, st.CEXReplicaAlert, tt.deviceAlert, tt.replicaAlert)
			}
			if string(h.Status) != tt.healthy || string(h.Reason) != tt.reason || !strings.Contains(h.Message, tt.message) {
				t.Errorf("IsHealthy %s %s %q, want %s %s %q", h.Status, h.Reason, h.Message, tt.healthy, tt.reason, tt.message)
			}
		})
	}
}

func TestReleaseValues(t *testing.T) {
	k := New(service.Base{})
	p := &basev1beta1.CEXPlugin{Spec: basev1beta1.CEXPluginSpec{Overcommit: 3, ConfigSets: []basev1beta1.CryptoConfigSet{
		{Name: "payments", APQNs: []basev1beta1.APQN{{Adapter: 3, Domain: 11}}},
	}}}
	ns, v, err := k.Release(p, "cloister-system")
	if err != nil {
		t.Fatal(err)
	}
	if ns != "cloister-system" || v["cexType"] != "ep11" || v["overcommit"] != int64(3) ||
		v["configSets"] != `{"configSets":[{"name":"payments","apqns":[{"adapter":3,"domain":11}]}]}` {
		t.Errorf("values %v in %s", v, ns)
	}
	// An APQN in two sets is refused with the plugin's own message.
	p.Spec.ConfigSets = append(p.Spec.ConfigSets, basev1beta1.CryptoConfigSet{Name: "audit", APQNs: []basev1beta1.APQN{{Adapter: 3, Domain: 11}}})
	if _, _, err := k.Release(p, "cloister-system"); err == nil || !strings.Contains(err.Error(), "spec.configSets[1] (audit).apqns[0]: duplicate APQN 03.000b") {
		t.Errorf("duplicate APQN: %v", err)
	}
}
