package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// DefaultRescanInterval is how often the devices are scanned without a
// file event: a device's health may change without one.
const DefaultRescanInterval = 5 * time.Second

// DefaultCDIDir is where CDI specs go: the runtime's dynamic spec folder.
const DefaultCDIDir = "/var/run/cdi"

// Driver runs one family's DRA driver on a node.
type Driver struct {
	Family   Family
	NodeName string
	Client   kubernetes.Interface
	// KubeletDir is the kubelet's root folder: the driver registers in
	// its plugins_registry and serves from plugins/<driver> (the same
	// paths inside the driver's container as on the host).
	KubeletDir string
	// CDIDir is the container runtime's CDI spec folder.
	CDIDir         string
	RescanInterval time.Duration
	// Rescan asks for a scan now (uevents); may be nil.
	Rescan <-chan struct{}
	Log    *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics

	mu       sync.Mutex
	devices  map[string]Device
	ckpt     *checkpoint
	ckptPath string
	cdi      cdi
	changed  chan struct{} // closed and replaced when health changes
	helper   *kubeletplugin.Helper
	serving  bool
	cancel   context.CancelCauseFunc
}

// Ready says whether the kubelet registered the driver (and why not).
func (d *Driver) Ready() error {
	d.mu.Lock()
	serving, helper := d.serving, d.helper
	d.mu.Unlock()
	if !serving {
		return errors.New("not serving yet")
	}
	st := helper.RegistrationStatus()
	switch {
	case st == nil:
		return errors.New("the kubelet has not registered the driver yet")
	case !st.PluginRegistered:
		return fmt.Errorf("the kubelet refused the driver: %s", st.Error)
	}
	return nil
}

// PluginDir is the driver's folder under the kubelet's: its socket and
// checkpoint.
func (d *Driver) PluginDir() string {
	return filepath.Join(d.KubeletDir, "plugins", d.Family.Driver())
}

func (d *Driver) init() error {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.RescanInterval <= 0 {
		d.RescanInterval = DefaultRescanInterval
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics(d.Family.Driver())
	}
	if d.NodeName == "" {
		return errors.New("the node's name is unset: give NODE_NAME from the downward API (spec.nodeName)")
	}
	if d.CDIDir == "" {
		d.CDIDir = DefaultCDIDir
	}
	for _, dir := range []string{filepath.Join(d.KubeletDir, "plugins_registry"), d.PluginDir()} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("kubelet folder %s: %w", dir, err)
		}
	}
	d.ckptPath = filepath.Join(d.PluginDir(), "checkpoint.json")
	ckpt, err := readCheckpoint(d.ckptPath)
	if err != nil {
		return err
	}
	d.ckpt, d.cdi, d.changed = ckpt, cdi{dir: d.CDIDir, vendor: d.Family.Driver()}, make(chan struct{})
	d.Metrics.prepared.Set(float64(len(ckpt.Prepared)))
	return nil
}

// Run serves until ctx ends or a fatal error.
func (d *Driver) Run(ctx context.Context) error {
	if err := d.init(); err != nil {
		return err
	}
	ctx, d.cancel = context.WithCancelCause(ctx)
	// The helper logs through klog's context logger: into ours.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(d.Log.Handler()))
	w, err := newWatch(d.Log)
	if err != nil {
		return err
	}
	defer w.close()
	if wa, ok := d.Family.(Watcher); ok {
		w.follow(wa.WatchPaths())
	}
	devs, err := d.Family.Scan(ctx)
	if err != nil {
		return fmt.Errorf("scanning devices: %w", err)
	}
	d.setDevices(devs)
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(d.Family.Driver()),
		kubeletplugin.KubeClient(d.Client),
		kubeletplugin.NodeName(d.NodeName),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(d.KubeletDir, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(d.PluginDir()),
	)
	if err != nil {
		return fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	d.mu.Lock()
	d.helper = helper
	d.mu.Unlock()
	if err := d.publish(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	d.serving = true
	d.mu.Unlock()
	d.Log.Info("serving DRA driver", "driver", d.Family.Driver(), "node", d.NodeName, "devices", len(devs), "socket", filepath.Join(d.PluginDir(), "dra.sock"))

	tick := time.NewTicker(d.RescanInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			return nil
		case <-tick.C:
		case <-d.Rescan:
		case <-w.kick:
		}
		if wa, ok := d.Family.(Watcher); ok {
			w.follow(wa.WatchPaths())
		}
		devs, err := d.Family.Scan(ctx)
		if err != nil {
			d.Log.Warn("scanning devices; keeping the last ones", "error", err)
			continue
		}
		if d.setDevices(devs) {
			if err := d.publish(ctx); err != nil {
				d.Log.Error("publishing devices", "error", err)
			}
		}
	}
}

// setDevices keeps a scan and says whether it differs from the last.
func (d *Driver) setDevices(devs []Device) bool {
	next := ByName(devs)
	d.mu.Lock()
	defer d.mu.Unlock()
	same := len(next) == len(d.devices)
	health := same
	for name, dev := range next {
		old, ok := d.devices[name]
		switch {
		case !ok:
			same, health = false, false
		case old.Healthy != dev.Healthy || old.Message != dev.Message:
			same, health = false, false
		case !apiequality.Semantic.DeepEqual(old.Device, dev.Device):
			same = false
		}
	}
	d.devices = next
	if !health {
		close(d.changed)
		d.changed = make(chan struct{})
	}
	if !same {
		d.Log.Info("devices changed", "devices", len(next), "healthy", countHealthy(next))
		d.Metrics.setDevices(countHealthy(next), len(next))
	}
	return !same
}

func countHealthy(devs map[string]Device) int {
	n := 0
	for _, d := range devs {
		if d.Healthy {
			n++
		}
	}
	return n
}

// UnhealthyTaint is the taint key of a device its driver found unhealthy:
// no new claim is allocated it; pods that hold it see its health.
const UnhealthyTaint = "cloister.dev/unhealthy"

// slice is the node's pool as published: the devices by name, unhealthy
// ones tainted.
func (d *Driver) slice() []resourceapi.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]resourceapi.Device, 0, len(d.devices))
	for _, dev := range d.devices {
		pub := *dev.DeepCopy()
		if !dev.Healthy {
			pub.Taints = append(pub.Taints, resourceapi.DeviceTaint{Key: UnhealthyTaint, Effect: resourceapi.DeviceTaintEffectNoSchedule})
		}
		out = append(out, pub)
	}
	slices.SortFunc(out, func(a, b resourceapi.Device) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// HandleError logs background errors (publishing); a fatal one stops the
// driver so its pod restarts.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.Log.Warn(msg, "error", err)
		return
	}
	d.Log.Error(msg, "error", err)
	if d.cancel != nil {
		d.cancel(fmt.Errorf("%s: %w", msg, err))
	}
}
