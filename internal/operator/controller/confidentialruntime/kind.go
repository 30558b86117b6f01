// Package confidentialruntime is the ConfidentialRuntime controller: the
// shared service reconciler with the confidential runtime chart (the
// RuntimeClass and the node installer DaemonSet), the per-node status
// from the installers' pods, and deletion that first rolls the installers
// out in removal mode, so the handler leaves the nodes before the
// RuntimeClass and DaemonSet go.
package confidentialruntime

import (
	"context"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// Kind adapts ConfidentialRuntime to the service reconciler.
type Kind struct {
	service.Base
	// Version is the Cloister version whose runtime class name the
	// operator installs (cloister generate of the same version names it).
	Version string
}

var (
	_ service.Kind    = (*Kind)(nil)
	_ service.Drainer = (*Kind)(nil)
)

func (k *Kind) Name() string          { return "ConfidentialRuntime" }
func (k *Kind) ReleasePrefix() string { return "ccr" }
func (k *Kind) New() service.Object   { return &basev1beta1.ConfidentialRuntime{} }
func as(obj service.Object) *basev1beta1.ConfidentialRuntime {
	return obj.(*basev1beta1.ConfidentialRuntime)
}

// className is the RuntimeClass and handler of the CR.
func (k *Kind) className(r *basev1beta1.ConfidentialRuntime) string {
	return runtimeclass.ClassName(runtimeclass.Platform(r.Spec.Platform), k.Version)
}

// Release places the installers in spec.namespace (default: the
// operator's). A CR being deleted gets the same release in removal mode.
func (k *Kind) Release(obj service.Object, operatorNamespace string) (string, map[string]any, error) {
	r := as(obj)
	ns, values, err := service.NamespacedValues(&r.Spec.ServiceSpec, r.Spec.Namespace, operatorNamespace, k.DefaultImage)
	if err != nil {
		return "", nil, err
	}
	overhead, err := service.Plain(r.Spec.Overhead)
	if err != nil {
		return "", nil, err
	}
	if overhead == nil {
		overhead = map[string]any{}
	}
	config := r.Spec.ContainerdConfig
	if config == "" {
		config = runtimeclass.DefaultConfigPath
	}
	socket := r.Spec.ContainerdSocket
	if socket == "" {
		socket = runtimeclass.DefaultSocket
	}
	values["platform"] = r.Spec.Platform
	values["runtimeClassName"] = k.className(r)
	values["overhead"] = overhead
	values["containerdConfig"] = config
	values["containerdSocket"] = socket
	values["configDir"] = filepath.Dir(config)
	values["socketDir"] = filepath.Dir(socket)
	values["remove"] = r.DeletionTimestamp != nil
	values["version"] = service.ImageTag(values["image"].(string))
	return ns, values, nil
}

// installerPods lists the CR's installer pods.
func (k *Kind) installerPods(ctx context.Context, r *basev1beta1.ConfidentialRuntime, namespace string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	err := k.Reader.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{
		service.LabelOwnerKind: k.Name(), service.LabelOwnerName: r.Name})
	return pods.Items, err
}

// FillStatus computes every node's state from the installers' pods.
func (k *Kind) FillStatus(ctx context.Context, obj service.Object, oos []service.Owned) health.Observation {
	r := as(obj)
	ds := service.LiveDaemonSet(oos)
	var pods []corev1.Pod
	if ds != nil {
		var err error
		if pods, err = k.installerPods(ctx, r, ds.Namespace); err != nil {
			r.Status.DesiredNumberScheduled, r.Status.NumberInstalled, r.Status.RuntimeInstallAlert = -1, -1, -1
			return health.Obs(health.Unknown, health.ReasonReadError, "listing the node installers: "+err.Error())
		}
	}
	st, healthy := Nodes(ds, pods)
	st.ServiceStatus = r.Status.ServiceStatus
	st.RuntimeClassName = k.className(r)
	r.Status = st
	if runtimeclass.Platform(r.Spec.Platform) == runtimeclass.Sim {
		healthy.Message += "; " + simWarning
	}
	return healthy
}

// simWarning is said wherever the sim runtime's health is: its pods run
// in plain containers, which no TEE protects.
const simWarning = "platform sim runs pods in plain runc containers: insecure, for development only"

// Drain is done when every installer runs in removal mode and is ready:
// the handler is out of every node's containerd and the labels are gone.
func (k *Kind) Drain(ctx context.Context, obj service.Object, oos []service.Owned) (service.DrainState, string) {
	ds := service.LiveDaemonSet(oos)
	if ds == nil {
		return service.Drained, "no node installer runs"
	}
	if ds.Spec.Template.Labels[LabelMode] != ModeRemove {
		return service.DrainStart, ""
	}
	pods, err := k.installerPods(ctx, as(obj), ds.Namespace)
	if err != nil {
		return service.Draining, "listing the node installers: " + err.Error()
	}
	return Removed(ds, pods)
}

// Metrics exports every metric and alert field.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	s := as(obj).Status
	out := []metrics.Sample{
		{Field: "desiredNumberScheduled", Value: float64(s.DesiredNumberScheduled)},
		{Field: "numberInstalled", Value: float64(s.NumberInstalled)},
		{Field: "runtimeInstallAlert", Value: float64(s.RuntimeInstallAlert)},
	}
	for node, n := range s.Nodes {
		v := 0.0
		if n.State == basev1beta1.RuntimeNodeInstalled {
			v = 1
		}
		out = append(out, metrics.Sample{Field: "numberInstalled", Node: node, Value: v})
	}
	return out
}
