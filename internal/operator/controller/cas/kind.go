// Package cas is the CAS controller: the shared service reconciler with
// the CAS chart (a StatefulSet of spec.replicas pods, its Service, volume
// claims, disruption budget and scheduled backup), its release pinned to
// the CR's spec, and a status read from the running CAS itself (its
// version, root CA, and whether it is initialised, in recovery or ready,
// over a connection trusted by CAS's evidence) and from its pods (the
// replicas ready and recovering).
package cas

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/tee"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/gramine"
	"github.com/cloister-cc/cloister/internal/cas/tlog"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/cas/witness"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

// Kind adapts CAS to the service reconciler.
type Kind struct {
	service.Base
	// Writer makes the CAS pod's Secrets (init token, simulation key) and
	// its simulation ConfigMap; the operator only ever creates and
	// patches the Secrets, never reads them.
	Writer client.Writer
	// keys holds, per simulated CAS, a simulation key made but not yet
	// in its Secret (simulation.go).
	keys pendingKeys
	// consumed records the CASes (by UID) whose used init token this
	// process emptied: once each, also for a CAS an older operator
	// initialised, which renewed the token instead.
	consumed sync.Map
	// Dial, when set, replaces dialling the CAS pod's address (tests run
	// CAS on loopback).
	Dial func(podAddress string) casclient.DialFunc
}

var (
	_ service.Kind          = (*Kind)(nil)
	_ service.Poller        = (*Kind)(nil)
	_ service.PinnedRelease = (*Kind)(nil)
)

// How often CAS's own state is read besides the watches: its pod turns
// Ready when CAS is initialised or recovered, which wakes the controller
// sooner; the poll catches what a watch cannot see.
const (
	pollWaiting = 10 * time.Second
	pollReady   = time.Minute
	// probeTimeout bounds one read of CAS's state.
	probeTimeout = 5 * time.Second
)

func (k *Kind) Name() string { return "CAS" }

// NoAutoUpdate: spec.autoUpdate never moves CAS (its CRD refuses it too):
// a new image is a new measurement, which its owners approve.
func (k *Kind) NoAutoUpdate()         {}
func (k *Kind) ReleasePrefix() string { return conn.ReleasePrefix }

// Carry keeps the image an empty spec.image resolved to when CAS was
// installed: CAS is not updated behind its owners' backs (SCONE keeps
// autoUpdate off for CAS), since on hardware a new image is a new
// identity its replicas cannot hand the seed to. Set spec.image to move
// it.
func (k *Kind) Carry(obj service.Object, deployed, values map[string]any) {
	if as(obj).Spec.Image != "" {
		return
	}
	if image, ok := deployed["image"].(string); ok && image != "" {
		values["image"] = image
		values["version"] = service.ImageTag(image)
	}
}
func (k *Kind) New() service.Object              { return &servicesv1beta1.CAS{} }
func as(obj service.Object) *servicesv1beta1.CAS { return obj.(*servicesv1beta1.CAS) }
func ref(c *servicesv1beta1.CAS) conn.Ref {
	return conn.Ref{Namespace: c.Namespace, Name: c.Name, Port: int(c.Spec.Service.ClientPort)}
}

// Release places CAS in the CR's namespace, its Service named as the CR.
func (k *Kind) Release(obj service.Object, operatorNamespace string) (string, map[string]any, error) {
	c := as(obj)
	ns, values, err := service.NamespacedValues(&c.Spec.ServiceSpec, c.Namespace, c.Namespace, k.DefaultImage)
	if err != nil {
		return "", nil, err
	}
	values["operatorNamespace"] = operatorNamespace
	for key, v := range map[string]any{"service": c.Spec.Service, "persistence": c.Spec.Persistence, "networkPolicy": c.Spec.NetworkPolicy} {
		plain, err := service.Plain(v)
		if err != nil {
			return "", nil, err
		}
		values[key] = plain
	}
	values["name"] = c.Name
	values["simulation"] = c.Spec.Simulation
	values["sealing"] = string(cmp.Or(c.Spec.Sealing, servicesv1beta1.CASSealingNode))
	values["replicas"] = max(c.Spec.Replicas, 1)
	if vm := c.Spec.ConfidentialVM; vm != nil {
		values["confidentialVM"] = map[string]any{"platform": vm.Platform, "runtimeClassName": vm.RuntimeClassName}
	}
	if enc := c.Spec.SGX; enc != nil {
		sealing := gramine.SealToMRENCLAVE
		if enc.Sealing == servicesv1beta1.CASSealToMRSIGNER {
			sealing = gramine.SealToMRSIGNER
		}
		values["sgx"] = map[string]any{"manifest": sealing.Manifest, "dir": gramine.Dir, "epc": strconv.Itoa(gramine.EnclaveSize), "epcResource": tee.SGXEPC}
	}
	if wp := c.Spec.WitnessPolicy; wp != "" {
		if c.Spec.SGX != nil {
			return "", nil, errors.New("spec.witnessPolicy: not for CAS in SGX yet (its enclave's manifest fixes its files): remove it, or run CAS in a confidential VM or in simulation")
		}
		if _, err := witness.ParsePolicy([]byte(wp)); err != nil {
			return "", nil, fmt.Errorf("spec.witnessPolicy: %w", err)
		}
		values["witnessPolicy"] = wp
	}
	if b := c.Spec.Backup; b != nil {
		values["backup"] = map[string]any{"schedule": b.Schedule, "claimName": b.ClaimName, "keep": max(b.Keep, 1)}
	}
	if col := c.Spec.Collateral; col != nil {
		values["collateral"] = map[string]any{"pcs": col.PCS, "kds": col.KDS, "dcapAPIKeySecret": col.DCAPAPIKeySecret}
	}
	values["enclaveResource"] = tee.SGXEnclave
	values["version"] = service.ImageTag(values["image"].(string))
	return ns, values, nil
}

// FillStatus reads CAS's version and state from its pod, over a
// connection trusted by CAS's evidence, and judges them.
func (k *Kind) FillStatus(ctx context.Context, obj service.Object, oos []service.Owned) health.Observation {
	c := as(obj)
	if c.DeletionTimestamp == nil {
		// One token, for the one init: never made again once CAS was
		// initialised, whatever happened to the Secret since.
		if c.Status.InitializedAt == nil {
			if err := k.makeInitToken(ctx, c); err != nil {
				return health.Obs(health.Unknown, health.ReasonCASUnreachable, err.Error())
			}
		}
		if err := k.simulation(ctx, c); err != nil {
			return health.Obs(health.Unknown, health.ReasonCASUnreachable, err.Error())
		}
	}
	c.Status.HostData = ""
	if c.Spec.ConfidentialVM != nil {
		// Before the probe: it pins the host data.
		c.Status.HostData = hostData(oos)
	}
	p := k.probe(ctx, c)
	k.replicas(ctx, c)
	c.Status.LastBackup = lastBackup(oos)
	if p.Err != nil {
		c.Status.CASState = ""
	} else {
		c.Status.CASState = string(p.State)
	}
	if c.Status.InitializedAt == nil && p.Err == nil && p.State == wire.Ready {
		now := metav1.Now()
		c.Status.InitializedAt = &now
	}
	if _, done := k.consumed.Load(c.UID); c.Status.InitializedAt != nil && c.DeletionTimestamp == nil && !done {
		// An init used the token: it is emptied, and none is made again,
		// so a CAS that finds itself uninitialised later is initialised
		// anew only by its recovery owners' signatures. Once per CAS and
		// process, for a CAS an older operator renewed the token of too.
		if err := k.consumeInitToken(ctx, c); err != nil {
			return health.Obs(health.Unknown, health.ReasonCASUnreachable, err.Error())
		}
		k.consumed.Store(c.UID, true)
	}
	switch {
	case p.Err != nil:
	case p.State == wire.Uninitialized:
		// Its state is gone (CASStateLost says so): a new CAS, or a
		// state its owners take back, counts its generations anew, and
		// has a log of its own.
		c.Status.StateGeneration, c.Status.LogCheckpoint = 0, ""
	case p.Mark != nil:
		c.Status.StateGeneration = max(c.Status.StateGeneration, generation(p.Mark))
	}
	c.Status.CASStateAlert = 0
	if p.Err == nil && (p.StateProblem != "" || p.LogProblem != nil || p.State == wire.Ready && below(p.Mark, c.Status.StateGeneration)) {
		c.Status.CASStateAlert = 1
	}
	return judge(ref(c), teeOf(c), c.Spec.Persistence.Enabled, c.Status.InitializedAt, c.Status.StateGeneration, p)
}

// teeOf is the TEE c runs CAS in.
func teeOf(c *servicesv1beta1.CAS) string {
	switch {
	case c.Spec.SGX != nil:
		return teeSGX
	case c.Spec.ConfidentialVM != nil:
		return teeVM
	}
	return teeNone
}

// makeInitToken makes the CAS pod's init token Secret unless it is there.
// The token is random and never leaves the Secret through the operator.
func (k *Kind) makeInitToken(ctx context.Context, c *servicesv1beta1.CAS) error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: k.owned(c, conn.InitTokenSecret(c.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{conn.InitTokenKey: []byte(base64.RawURLEncoding.EncodeToString(b))},
	}
	if err := k.Writer.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("making CAS's init token (Secret %s/%s): %w", sec.Namespace, sec.Name, err)
	}
	return nil
}

// consumeInitToken empties the used init token: the Secret stays (the CAS
// pods mount it), holding nothing that initialises a CAS.
func (k *Kind) consumeInitToken(ctx context.Context, c *servicesv1beta1.CAS) error {
	sec := &corev1.Secret{ObjectMeta: k.owned(c, conn.InitTokenSecret(c.Name))}
	patch, err := service.OwnedPatch(sec.ObjectMeta, map[string][]byte{conn.InitTokenKey: {}})
	if err != nil {
		return err
	}
	if err := k.Writer.Patch(ctx, sec, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("emptying CAS's used init token (Secret %s/%s): %w", sec.Namespace, sec.Name, err)
	}
	return nil
}

func (k *Kind) probe(ctx context.Context, c *servicesv1beta1.CAS) Probe {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cl, att, err := (&conn.Connector{Reader: k.Reader, Dial: k.Dial}).Connect(ctx, c)
	if err != nil {
		return Probe{Err: err}
	}
	defer cl.CloseIdleConnections()
	version, err := cl.Version(ctx)
	if err != nil {
		return Probe{Err: err}
	}
	c.Status.Version = version
	c.Status.SimulationKeys = att.PublicKey.SimulationKeys
	c.Status.Collateral = collateralStatus(att.PublicKey.Collateral)
	c.Status.CollateralAlert = 0
	if col := c.Status.Collateral; col != nil {
		c.Status.CollateralAlert = col.Stale + col.Expired
	}
	c.Status.RootCA = ""
	if att.PublicKey.State == string(wire.Ready) {
		cas, err := cl.CAs(ctx)
		if err != nil {
			return Probe{Err: err}
		}
		if c.Status.RootCA, err = RootCAFingerprint(cas.RootCA); err != nil {
			return Probe{Err: fmt.Errorf("CAS's root CA: %w", err)}
		}
	}
	p := Probe{State: wire.State(att.PublicKey.State), StateReason: att.PublicKey.StateReason, StateProblem: att.PublicKey.StateProblem, Mark: att.PublicKey.StateMark,
		Insecure: att.Claims.Insecure, Collateral: att.PublicKey.Collateral}
	if p.State == wire.Ready {
		if p.LogProblem, err = rememberLog(ctx, cl, c, p.Mark); err != nil {
			return Probe{Err: err}
		}
	}
	return p
}

// rememberLog checks that CAS's transparency log extends the checkpoint
// in c's status, and keeps the larger there; problem says why not.
//
// One log that does not extend it is CAS's own doing: after the recovery
// owners took back an older state (a backup), CAS serves that state's
// older log with their acceptance logged after it, and moves the state's
// generation past every one it served. Such a log, at a generation not
// below the one c's status recorded, is the one to extend from then on. A
// replayed older state, acceptance and all, is below that generation, and
// stays refused (CASStateRolledBack says so).
func rememberLog(ctx context.Context, cl *casclient.Client, c *servicesv1beta1.CAS, mark *wire.StateMark) (problem, err error) {
	cp, v, err := cl.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	fetch := func(path string) ([]byte, error) { return cl.LogTile(ctx, path) }
	larger, problem := tlog.Extends([]byte(c.Status.LogCheckpoint), cp, v, fetch)
	if problem != nil && mark != nil && generation(mark) >= c.Status.StateGeneration {
		accepted, err := tlog.HasAccept(cp, fetch)
		if err != nil {
			return nil, err
		}
		if accepted {
			problem, larger = nil, true
		}
	}
	if problem == nil && larger {
		c.Status.LogCheckpoint = string(cp.Note)
	}
	return problem, nil
}

func collateralStatus(h *wire.CollateralHealth) *servicesv1beta1.CASCollateralStatus {
	if h == nil {
		return nil
	}
	out := &servicesv1beta1.CASCollateralStatus{Entries: int32(min(h.Entries, math.MaxInt32)), Stale: int32(min(h.Stale, math.MaxInt32)), Expired: int32(min(h.Expired, math.MaxInt32))} //nolint:gosec // bounded above
	if h.NextUpdate != nil {
		t := metav1.NewTime(*h.NextUpdate)
		out.NextUpdate = &t
	}
	return out
}

// replicas counts CAS's pods into the status: ready ones hold the seed,
// running ones that are not are recovering it.
func (k *Kind) replicas(ctx context.Context, c *servicesv1beta1.CAS) {
	want := max(c.Spec.Replicas, 1)
	var pods []*corev1.Pod
	for _, name := range conn.PodNames(c.Name, want) {
		pod := &corev1.Pod{}
		if err := k.Reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, pod); err == nil {
			pods = append(pods, pod)
		}
	}
	c.Status.Replicas = want
	c.Status.ReadyReplicas, c.Status.RecoveringReplicas = countReplicas(pods)
	c.Status.CASReplicaAlert = max(want-c.Status.ReadyReplicas, 0)
}

// PollAfter reads CAS again soon while it waits for its owners.
func (k *Kind) PollAfter(obj service.Object) time.Duration {
	if as(obj).Status.CASState == string(wire.Ready) {
		return pollReady
	}
	return pollWaiting
}

// Metrics: CAS's state as 1 for ready.
func (k *Kind) Metrics(obj service.Object) []metrics.Sample {
	ready := 0.0
	if as(obj).Status.CASState == string(wire.Ready) {
		ready = 1
	}
	st := &as(obj).Status
	return []metrics.Sample{
		{Field: "casReady", Value: ready},
		{Field: "collateralAlert", Value: float64(st.CollateralAlert)},
		{Field: "casReplicas", Value: float64(st.Replicas)},
		{Field: "casReadyReplicas", Value: float64(st.ReadyReplicas)},
		{Field: "casRecoveringReplicas", Value: float64(st.RecoveringReplicas)},
		{Field: "casReplicaAlert", Value: float64(st.CASReplicaAlert)},
		{Field: "casStateAlert", Value: float64(st.CASStateAlert)},
	}
}
