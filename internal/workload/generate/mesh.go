package generate

import (
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cloister-cc/cloister/internal/mesh/annotation"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// The service mesh's containers: the redirect (an init container, the
// only one with NET_ADMIN) and the proxy (a native sidecar, started
// before the app and running beside it).
const (
	MeshName         = "cloister-mesh"
	MeshRedirectName = "cloister-mesh-redirect"
)

// meshMemory is the proxy's memory limit (and request), counted into
// the VM's memory: a Go proxy with its buffers.
var meshMemory = resource.MustParse("64Mi")

// errMeshWithoutInitializer: the proxy needs the certificates the
// initializer writes.
var errMeshWithoutInitializer = errors.New("the service mesh annotations need the initializer's certificates: drop " +
	SkipInitializerAnnotation + " (and skip-initializer), or skip the service mesh")

// injectMesh puts the mesh's containers right after the initializer (or
// brings them up to date), or takes them out when the pod has no mesh.
// Their arguments carry the configuration, so the pod's policy covers it.
func injectMesh(pod *corev1.PodSpec, cfg annotation.Config, present bool, image string) error {
	if err := restoreProbes(pod); err != nil {
		return err
	}
	pod.InitContainers = slices.DeleteFunc(pod.InitContainers, func(c corev1.Container) bool {
		return c.Name == MeshName || c.Name == MeshRedirectName
	})
	if !present {
		return nil
	}
	flags := []string{"--ingress=" + cfg.Ingress.String(), "--egress=" + annotation.FormatEgress(cfg.Egress)}
	mount := []corev1.VolumeMount{{Name: SecretsVolume, MountPath: initenv.SecretsPath, ReadOnly: true}}
	no, yes, root := false, true, int64(0)
	var mesh []corev1.Container
	if !cfg.Ingress.Disabled {
		mesh = append(mesh, corev1.Container{
			Name: MeshRedirectName, Image: image, Args: append([]string{"redirect"}, flags[0]),
			// Root for the capability to take effect; NET_ADMIN alone.
			SecurityContext: &corev1.SecurityContext{
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
				RunAsUser:    &root, RunAsNonRoot: &no, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
			},
		})
	}
	always := corev1.ContainerRestartPolicyAlways
	mesh = append(mesh, corev1.Container{
		Name: MeshName, Image: image, Args: append(append([]string{"proxy"}, flags...), meshProbes(pod, cfg.Ingress)...),
		RestartPolicy: &always,
		StartupProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt32(annotation.AdminPort)}},
			PeriodSeconds: 1, FailureThreshold: 120,
		},
		Ports: []corev1.ContainerPort{{Name: "mesh-admin", ContainerPort: annotation.AdminPort, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: meshMemory}, Requests: corev1.ResourceList{corev1.ResourceMemory: meshMemory}},
		// It reads the initializer's files by the pod's group, as every
		// container does (initenv.FilesGroup).
		SecurityContext: &corev1.SecurityContext{
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
		},
		VolumeMounts: mount,
	})
	at := 0
	if len(pod.InitContainers) > 0 && pod.InitContainers[0].Name == InitializerName {
		at = 1
	}
	pod.InitContainers = slices.Insert(pod.InitContainers, at, mesh...)
	return nil
}
