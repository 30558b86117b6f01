package generate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

// GPUs as confidential GPU pods use them on Kata (Contrast's setup): NVIDIA's resources,
// passed into the VM by a CDI annotation, seen through the VM's GPU
// utilities when NVIDIA_VISIBLE_DEVICES is all.
const (
	gpuResourcePrefix = "nvidia.com/"
	gpuVisibleEnv     = "NVIDIA_VISIBLE_DEVICES"
	// gpuMinMemoryMiB is a light GPU workload's VM memory at least.
	gpuMinMemoryMiB = 8192
)

// checkResources checks a confidential pod's memory and GPUs and returns
// its VM's memory in MiB with warnings; problems are one error naming
// every container and annotation to fix.
func checkResources(pod *corev1.PodSpec, annotations map[string]string, opts Options) (int64, []string, error) {
	limits, problems := checkMemory(pod, opts.FixResources)
	vm := limits + opts.OverheadMiB
	var warnings []string
	gpus := gpuContainers(pod)
	for _, i := range gpus {
		c := &pod.Containers[i]
		if !hasEnv(c, gpuVisibleEnv, "all") {
			problems = append(problems, fmt.Sprintf("containers[%d] (%s): requests a GPU but env %s is not \"all\": set it so the container sees the GPU utilities of the pod's VM", i, c.Name, gpuVisibleEnv))
		}
	}
	if len(gpus) > 0 && !hasCDI(annotations) {
		problems = append(problems, fmt.Sprintf("a container requests a GPU but the pod has no %s annotation: add one naming the device to pass into the VM (e.g. %sgpu: \"nvidia.com/pgpu=0\")", podpolicy.CDIAnnotationPrefix+"*", podpolicy.CDIAnnotationPrefix))
	}
	if v, ok := annotations[podpolicy.DefaultMemoryAnnotation]; ok {
		mib, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || mib <= 0:
			problems = append(problems, fmt.Sprintf("annotation %s %q must be the VM's memory in MiB (e.g. \"16384\")", podpolicy.DefaultMemoryAnnotation, v))
		case mib < limits:
			problems = append(problems, fmt.Sprintf("annotation %s is %d MiB, less than the containers' memory limits (%d MiB): raise it", podpolicy.DefaultMemoryAnnotation, mib, limits))
		default:
			vm = mib
		}
	} else if len(gpus) > 0 {
		warnings = append(warnings, fmt.Sprintf("a GPU pod's VM gets %d MiB: a light GPU workload needs about %d; set annotation %s", vm, gpuMinMemoryMiB, podpolicy.DefaultMemoryAnnotation))
	}
	if len(problems) > 0 {
		return 0, nil, errors.New(strings.Join(problems, "; "))
	}
	return vm, warnings, nil
}

// gpuContainers are the indexes of the app containers that ask for a GPU.
func gpuContainers(pod *corev1.PodSpec) []int {
	var out []int
	for i, c := range pod.Containers {
		if requestsGPU(c.Resources.Limits) || requestsGPU(c.Resources.Requests) {
			out = append(out, i)
		}
	}
	return out
}

func requestsGPU(l corev1.ResourceList) bool {
	for k := range l {
		if strings.HasPrefix(string(k), gpuResourcePrefix) {
			return true
		}
	}
	return false
}

func hasCDI(annotations map[string]string) bool {
	for k := range annotations {
		if strings.HasPrefix(k, podpolicy.CDIAnnotationPrefix) {
			return true
		}
	}
	return false
}

func hasEnv(c *corev1.Container, name, value string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name && e.ValueFrom == nil && e.Value == value })
}

// checkMemory holds every container that runs beside the app (the app
// containers and native sidecars) to a memory limit equal to its request
// (a confidential VM takes its limits from the node whatever the requests
// say) and returns the sum of the limits in MiB. Init containers that
// finish before the app starts run inside the same memory and are not
// counted.
func checkMemory(pod *corev1.PodSpec, fix bool) (int64, []string) {
	var sum resource.Quantity
	var problems []string
	check := func(field string, i int, c *corev1.Container) {
		limit, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s[%d] (%s): resources.limits.memory is not set: a confidential VM gets exactly the memory its containers' limits add up to; set it to the container's worst case", field, i, c.Name))
			return
		}
		if req, ok := c.Resources.Requests[corev1.ResourceMemory]; ok && req.Cmp(limit) != 0 {
			if !fix {
				problems = append(problems, fmt.Sprintf("%s[%d] (%s): resources.requests.memory %s differs from the limit %s: the VM always takes the limit from the node, so the scheduler must count it; make them equal (or run generate with fix-resources)", field, i, c.Name, req.String(), limit.String()))
				return
			}
			c.Resources.Requests[corev1.ResourceMemory] = limit.DeepCopy()
		}
		sum.Add(limit)
	}
	for i := range pod.InitContainers {
		if c := &pod.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			check("initContainers", i, c)
		}
	}
	for i := range pod.Containers {
		check("containers", i, &pod.Containers[i])
	}
	return (sum.Value() + (1<<20 - 1)) >> 20, problems
}
