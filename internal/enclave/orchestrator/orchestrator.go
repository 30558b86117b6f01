// Package orchestrator is what runs inside an enclave: it runs the
// manifest's user plugins as processes, restarts them by their restart
// policies, reports their states, applies a changed manifest in place
// (only the plugins whose configuration changed restart), and serves
// attestation evidence. All of it over one HTTP API (api.go) on the
// enclave's only channel to its pod: vsock on Nitro, a unix socket in
// simulation.
package orchestrator

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/enclave/channel"
	"github.com/cloister-cc/cloister/internal/enclave/logstream"
	"github.com/cloister-cc/cloister/internal/enclave/manifest"
)

// ErrNewEnclave: a manifest that changes what the enclave booted with
// (its size, its plugins and their images) needs a new enclave.
var ErrNewEnclave = errors.New("the manifest changes what the enclave booted with: it needs a new enclave")

// Backoff paces restarts: Initial after the first exit, doubling up to Max;
// a plugin that ran for Reset starts over at Initial.
type Backoff struct {
	Initial, Max, Reset time.Duration
}

// DefaultBackoff is the kubelet's pace, shortened: enclaves restart
// processes, not pulled containers.
var DefaultBackoff = Backoff{Initial: time.Second, Max: 30 * time.Second, Reset: 10 * time.Second}

// Orchestrator runs one enclave's plugins.
type Orchestrator struct {
	Log     *slog.Logger
	Backoff Backoff
	// StopGrace is how long a stopped plugin has between SIGTERM and
	// SIGKILL.
	StopGrace time.Duration
	// NewAttester makes the enclave's attester from the manifest it
	// booted with (the first applied).
	NewAttester func(boot *manifest.Manifest) (Attester, error)
	// Channel is the enclave's way to the pod, for the plugins' ports and
	// the egresses; nil: no relays (tests of plugins alone).
	Channel channel.Inside
	// PluginUIDBase, when set, runs the plugin at index i of the manifest
	// as user and group PluginUIDBase+i: never as root (so not with the
	// Nitro Secure Module, which only root opens), and each with a user
	// of its own, so stopping it ends every process it left, in its
	// group or not. 0 runs them as the orchestrator (a simulated
	// enclave, whose pod is not root).
	PluginUIDBase uint32
	// ManifestKey verifies every manifest before it is applied (the
	// owner's key, which a Nitro Enclave's image carries); nil: none is
	// checked, for simulated enclaves without one.
	ManifestKey *ecdsa.PublicKey
	// Logs holds the log Log writes (the plugins' lines among it), which
	// the pod's supervisor follows (GET /v1/logs); nil: none served.
	Logs *logstream.Buffer

	mu        sync.Mutex
	boot      string // boot digest of the first manifest
	applied   string // the applied manifest's digest
	manifests int    // how many manifests were applied (each extended a PCR)
	plugins   map[string]*plugin
	order     []string
	attester  Attester
	wg        sync.WaitGroup
	net       *network
	specs     []manifest.Plugin // the applied manifest's plugins
}

// Apply runs m: the first manifest boots the plugins; a later one with the
// same boot digest restarts the plugins whose configuration changed and
// leaves the others running.
func (o *Orchestrator) Apply(ctx context.Context, m *manifest.Manifest) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.boot == "" {
		if o.NewAttester != nil {
			a, err := o.NewAttester(m)
			if err != nil {
				return fmt.Errorf("preparing attestation: %w", err)
			}
			o.attester = a
		}
		o.boot = m.BootDigest()
		o.plugins = map[string]*plugin{}
	} else if m.BootDigest() != o.boot {
		return ErrNewEnclave
	}
	digest := m.ManifestDigest()
	if digest == o.applied {
		return nil // a supervisor syncing again: nothing changes, nothing is recorded
	}
	// The evidence shows every manifest before it runs: one PCR each,
	// locked, so a change taken back still shows.
	if o.manifests >= attest.NitroManifestSlots {
		return fmt.Errorf("%w: it applied %d manifests, as many as its evidence can show", ErrNewEnclave, o.manifests)
	}
	if o.attester != nil {
		raw, err := hex.DecodeString(digest)
		if err != nil {
			return err
		}
		if err := o.attester.Extend(o.manifests, raw); err != nil {
			return fmt.Errorf("recording the manifest in the evidence: %w", err)
		}
	}
	o.manifests++
	var changed []string
	order := make([]string, 0, len(m.Plugins))
	for i, spec := range m.Plugins {
		order = append(order, spec.Name)
		if p, ok := o.plugins[spec.Name]; ok {
			if reflect.DeepEqual(p.spec, spec) {
				continue
			}
			p.stop()
			changed = append(changed, spec.Name)
		}
		o.start(spec, i)
	}
	o.order = order
	o.specs = m.Plugins
	if err := o.syncNetwork(m); err != nil {
		o.log().Error("relaying the enclave's ports", "error", err.Error())
	}
	o.applied = digest
	if len(changed) > 0 {
		o.log().Info("manifest applied in place", "restarted", changed, "manifest", o.applied)
	} else {
		o.log().Info("manifest applied", "plugins", order, "manifest", o.applied)
	}
	return nil
}

func (o *Orchestrator) start(spec manifest.Plugin, index int) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &plugin{spec: spec, o: o, cancel: cancel, done: make(chan struct{}), index: index,
		status: manifest.PluginStatus{Name: spec.Name, State: manifest.PluginWaiting, Message: manifest.MessageStarting, Since: time.Now()}}
	if old, ok := o.plugins[spec.Name]; ok {
		p.status.Restarts = old.snapshot().Restarts
	}
	o.plugins[spec.Name] = p
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		p.run(ctx)
	}()
}

// Status reports every plugin, in the manifest's order, and whether
// their ports answer (checked without the lock: a dial may take a moment).
func (o *Orchestrator) Status() manifest.Status {
	o.mu.Lock()
	st := manifest.Status{Manifest: o.applied, Plugins: []manifest.PluginStatus{}}
	for _, name := range o.order {
		st.Plugins = append(st.Plugins, o.plugins[name].snapshot())
	}
	specs := o.specs
	o.mu.Unlock()
	st.Ports = portsAnswer(specs)
	return st
}

// Attest returns evidence binding nonce and the applied manifest's
// digest, from the attester of the booted enclave. The lock keeps an
// Apply from running between reading the digest and attesting.
func (o *Orchestrator) Attest(nonce []byte) (Evidence, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.attester == nil {
		return Evidence{}, errors.New("no manifest applied yet: the enclave has nothing to attest")
	}
	digest, err := hex.DecodeString(o.applied)
	if err != nil {
		return Evidence{}, fmt.Errorf("the applied manifest's digest %q: %w", o.applied, err)
	}
	return o.attester.Attest(nonce, digest)
}

// AttestData returns evidence binding nonce and reportData (a plugin's:
// the hash of the key its CSR names), from the attester of the booted
// enclave: the manifests it applied are in its PCRs.
func (o *Orchestrator) AttestData(nonce, reportData []byte) (Evidence, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.attester == nil || o.manifests == 0 {
		return Evidence{}, errors.New("no manifest applied yet: the enclave has nothing to attest")
	}
	return o.attester.Attest(nonce, reportData)
}

// Stop stops every plugin and waits for them.
func (o *Orchestrator) Stop() {
	o.mu.Lock()
	for _, p := range o.plugins {
		p.cancel()
	}
	o.stopNetwork()
	o.mu.Unlock()
	o.wg.Wait()
}

func (o *Orchestrator) log() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

func (o *Orchestrator) backoff() Backoff {
	if o.Backoff.Initial <= 0 {
		return DefaultBackoff
	}
	return o.Backoff
}

func (o *Orchestrator) stopGrace() time.Duration {
	if o.StopGrace <= 0 {
		return 10 * time.Second
	}
	return o.StopGrace
}
