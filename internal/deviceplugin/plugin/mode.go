// Package plugin serves kubelet device plugins. It owns the kubelet
// side of a plugin — one gRPC server per resource on a unix socket in the
// plugin directory, registration, re-registration after a kubelet restart,
// ListAndWatch streams, rescans on a timer and on filesystem events, and
// metrics — so that a mode (sgx, cex, nitro) only says which devices exist
// and what a container gets for them.
//
// Like Intel's device-plugin framework, the mode is one small required
// interface; what else it can do (preferred allocation, pre-start,
// filesystem watches, clean-up of released devices) is found by type
// assertion.
package plugin

import (
	"context"
	"os"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Device is one schedulable unit of a resource as kubelet sees it.
type Device struct {
	ID      string
	Healthy bool
}

// Inventory maps resource names (e.g. sgx.cloister.dev/enclave) to their
// devices. A resource present with no devices is served with an empty list.
type Inventory map[string][]Device

// Mode is what a kind of hardware provides.
type Mode interface {
	// Scan reports the devices that exist now and their health.
	Scan(ctx context.Context) (Inventory, error)
	// Allocate returns what one container that was given ids of resource
	// needs: device nodes, mounts, environment.
	Allocate(ctx context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error)
}

// Watcher is a Mode whose devices change with files: the manager rescans
// within a moment of any change directly inside one of these paths. The
// list is asked for again after every scan, so it may follow hot plugs.
type Watcher interface {
	WatchPaths() []string
}

// PreferredAllocator is a Mode with an opinion on which devices a container
// should get (kubelet's GetPreferredAllocation).
type PreferredAllocator interface {
	PreferredAllocation(resource string, available, mustInclude []string, size int) ([]string, error)
}

// PreStarter is a Mode that must act right before a container starts.
type PreStarter interface {
	PreStart(ctx context.Context, resource string, ids []string) error
}

// Releaser is a Mode that cleans up after devices no container holds any
// more. inUse is what kubelet's pod-resources API reports as assigned, per
// resource; it is called after each periodic rescan when that API answers.
type Releaser interface {
	Release(ctx context.Context, inUse map[string][]string) error
}

// Openable is the health check of a device node: it can be opened for
// reading and writing, as a container will.
func Openable(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}
