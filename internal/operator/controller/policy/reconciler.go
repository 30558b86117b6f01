// Package policy is the SignedPolicy and EncryptedPolicy controller: it
// registers each policy, once, with the CAS resource its casAddress names,
// over a connection trusted by CAS's evidence, and reports CAS's answer:
// HEALTHY with the policy's name, revision, hash and predecessor;
// UNHEALTHY with CAS's reason when CAS refuses it; PENDING, retried with
// backoff and woken by the CAS resource's changes, while CAS cannot be
// asked. Deleting the resource leaves the policy registered in CAS, whose
// history is append-only: a policy changes by a new signed version.
//
// A registered policy follows its CAS: when the CAS resource shows another
// root CA (CAS initialised again after it lost or replaced its state) or
// an uninitialised CAS, and every recheckEvery besides (a state restored
// to an older point keeps its root CA), the registration is sent again.
// CAS answers "unchanged" for a version it holds, so a registration sent
// twice (a replica died before it answered) lands once.
package policy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrl "sigs.k8s.io/controller-runtime/pkg/reconcile"

	casv1beta1 "github.com/cloister-cc/cloister/api/cas/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/policy/policyres"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	cascontroller "github.com/cloister-cc/cloister/internal/operator/controller/cas"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

// Object is a SignedPolicy or an EncryptedPolicy.
type Object interface {
	client.Object
	GetPolicyStatus() *casv1beta1.PolicyStatus
	GetCASAddress() string
}

// Reconciler registers the policies of one kind.
type Reconciler struct {
	Client    client.Client
	Connector *conn.Connector
	Recorder  events.EventRecorder
	// New returns an empty object of the kind.
	New func() Object

	once    sync.Once
	backoff workqueue.TypedRateLimiter[ctrl.Request]
	// checked is when each registered policy was last sent to CAS; an
	// operator that restarts sends each once more.
	checkedMu sync.Mutex
	checked   map[types.NamespacedName]sent
}

// sent is when a policy resource (by UID: a resource made again under
// its name is sent again) was last sent to CAS.
type sent struct {
	uid types.UID
	at  time.Time
}

// Backoff of a policy whose CAS cannot be asked; the CAS resource's
// changes (ready, recovered) wake it sooner.
const (
	retryFirst = time.Second
	retryMax   = 5 * time.Minute
	// callTimeout bounds one pass's calls to CAS.
	callTimeout = 15 * time.Second
	// recheckEvery: how often a registered policy is sent again to find
	// out whether CAS still holds it.
	recheckEvery = 10 * time.Minute
)

// Reconcile registers the policy unless it is registered, and reports.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.once.Do(func() {
		r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[ctrl.Request](retryFirst, retryMax)
	})
	obj := r.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.backoff.Forget(req)
			r.checkedMu.Lock()
			delete(r.checked, req.NamespacedName)
			r.checkedMu.Unlock()
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	st := obj.GetPolicyStatus()
	if obj.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	if after := r.holds(ctx, obj); after > 0 {
		// Registered with the CAS that runs: the spec cannot change, and
		// CAS keeps the version until it is replaced.
		return ctrl.Result{RequeueAfter: after}, nil
	}
	before := obj.DeepCopyObject().(Object)
	reg, err := r.register(ctx, obj)
	obs := judge(reg, err)
	if reg != nil && before.GetPolicyStatus().CASRootCA != "" && reg.CASRootCA != before.GetPolicyStatus().CASRootCA {
		obs.Message += fmt.Sprintf(" (registered again: CAS's root CA is %s, it was %s when the policy was registered before, so CAS was initialised again)",
			short(reg.CASRootCA), short(before.GetPolicyStatus().CASRootCA))
	}
	setStatus(st, obj.GetGeneration(), reg, obs)
	if !equality.Semantic.DeepEqual(before.GetPolicyStatus(), st) {
		if err := r.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
			}
			return ctrl.Result{}, fmt.Errorf("writing the status of %s: %w", req, err)
		}
		r.announce(obj, before.GetPolicyStatus().State, obs)
	}
	if obs.Status == health.True {
		r.markChecked(obj)
		r.backoff.Forget(req)
		return ctrl.Result{RequeueAfter: recheckEvery}, nil
	}
	if obs.Status != health.Unknown {
		r.backoff.Forget(req)
		return ctrl.Result{}, nil
	}
	log.FromContext(ctx).V(1).Info("CAS cannot be asked yet", "reason", obs.Reason, "message", obs.Message)
	return ctrl.Result{RequeueAfter: r.backoff.When(req)}, nil
}

// holds says how long until a registered policy is sent to CAS again: 0
// unless it is HEALTHY for its spec, with the root CA the CAS resource
// shows (the operator reads it from CAS), that CAS is not uninitialised,
// and it was sent within recheckEvery.
func (r *Reconciler) holds(ctx context.Context, obj Object) time.Duration {
	st := obj.GetPolicyStatus()
	if st.State != common.StateHealthy || st.Hash == "" || st.CASRootCA == "" || st.ObservedGeneration != obj.GetGeneration() {
		return 0
	}
	ref, err := conn.ParseAddress(obj.GetCASAddress())
	if err != nil {
		return 0
	}
	cas := &servicesv1beta1.CAS{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, cas); err != nil {
		return 0
	}
	if cas.Status.CASState == string(wire.Uninitialized) || (cas.Status.RootCA != "" && cas.Status.RootCA != st.CASRootCA) {
		return 0
	}
	r.checkedMu.Lock()
	last, ok := r.checked[client.ObjectKeyFromObject(obj)]
	r.checkedMu.Unlock()
	if !ok || last.uid != obj.GetUID() {
		return 0
	}
	return max(recheckEvery-time.Since(last.at), 0)
}

func (r *Reconciler) markChecked(obj Object) {
	r.checkedMu.Lock()
	defer r.checkedMu.Unlock()
	if r.checked == nil {
		r.checked = map[types.NamespacedName]sent{}
	}
	r.checked[client.ObjectKeyFromObject(obj)] = sent{uid: obj.GetUID(), at: time.Now()}
}

// short is a fingerprint's first 12 characters, for messages.
func short(fp string) string { return fp[:min(12, len(fp))] }

// announce emits one event per state change, with CAS's answer.
func (r *Reconciler) announce(obj Object, was common.State, obs health.Observation) {
	st := obj.GetPolicyStatus()
	switch st.State {
	case was:
	case common.StateHealthy:
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, string(health.EventRegistered), "Register", "%s", obs.Message)
	case common.StateUnhealthy:
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, string(health.EventRefused), "Register", "%s: %s", obs.Reason, obs.Message)
	default:
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, string(health.EventPending), "Register", "%s: %s", obs.Reason, obs.Message)
	}
}

// register finds the CAS resource, attests it, and registers the policy
// unless CAS's history already holds this version.
func (r *Reconciler) register(ctx context.Context, obj Object) (*Registration, error) {
	addr := obj.GetCASAddress()
	ref, err := conn.ParseAddress(addr)
	if err != nil {
		return nil, addressError{fmt.Errorf("%w; create the policy again with the address of a CAS resource", err)}
	}
	resource := &servicesv1beta1.CAS{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, resource); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w %s in this cluster, which casAddress %q names: create it, or create the policy again with another casAddress", errNoCAS, ref, addr)
		}
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cl, att, err := r.Connector.Connect(ctx, resource)
	if err != nil {
		return nil, err
	}
	defer cl.CloseIdleConnections()
	if att.PublicKey.State != string(wire.Ready) {
		return nil, fmt.Errorf("%w: CAS %s is %s; it registers policies once its owners have initialised or recovered it", errCASNotReady, ref, att.PublicKey.State)
	}
	cas, err := cl.CAs(ctx)
	if err != nil {
		return nil, err
	}
	root, err := cascontroller.RootCAFingerprint(cas.RootCA)
	if err != nil {
		return nil, fmt.Errorf("CAS %s's root CA: %w", ref, err)
	}
	req, err := request(obj)
	if err != nil {
		var ns namespaceError
		if errors.As(err, &ns) {
			return nil, err
		}
		return nil, addressError{err}
	}
	// Always CAS's answer, never a guess from its history: CAS checks the
	// signatures before it says "unchanged", so a copy of a registered
	// version signed by strangers is refused rather than reported.
	res, err := cl.RegisterPolicy(ctx, req)
	var apiErr *casclient.APIError
	if errors.As(err, &apiErr) && apiErr.Reason == wire.ReasonSuperseded {
		// CAS checked the signatures and holds this very version in its
		// history: the status says where, an operator that crashed
		// before writing it included.
		if doc, perr := policy.Parse([]byte(req.Policy)); perr == nil && req.EncryptionKey == "" {
			return &Registration{Name: doc.Name, Revision: req.Version, Hash: doc.Digest(), Predecessor: req.Predecessor, CASRootCA: root}, err
		}
	}
	if err != nil {
		return nil, err
	}
	return &Registration{Name: res.Name, Revision: res.Version, Hash: res.Digest, Predecessor: res.Predecessor, CASRootCA: root}, nil
}

// request is what CAS is sent.
func request(obj Object) (wire.PolicyRequest, error) {
	switch p := obj.(type) {
	case *casv1beta1.SignedPolicy:
		doc, err := policy.Parse([]byte(p.Spec.Policy))
		if err != nil {
			return wire.PolicyRequest{}, fmt.Errorf("spec.policy: %w", err)
		}
		if err := policy.InNamespace(doc.Name, p.Namespace); err != nil {
			return wire.PolicyRequest{}, namespaceError{fmt.Errorf("spec.policy: %w", err)}
		}
		signed := policyres.Signed(p)
		return wire.PolicyRequest{CASAddress: p.Spec.CASAddress, Policy: signed.Policy,
			Link: signed.Link, Signatures: signed.Signatures, Namespace: p.Namespace}, nil
	case *casv1beta1.EncryptedPolicy:
		// Sealed: CAS alone reads the name, and refuses it outside the
		// namespace.
		return wire.PolicyRequest{CASAddress: p.Spec.CASAddress, Policy: p.Spec.Policy, EncryptionKey: p.Spec.EncryptionKey, Namespace: p.Namespace}, nil
	}
	return wire.PolicyRequest{}, fmt.Errorf("unknown policy kind %T", obj)
}
