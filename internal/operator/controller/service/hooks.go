package service

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

// The optional hooks a Kind implements where it needs them; the package
// doc lists them.

// PinnedRelease is a Kind whose release changes only with its CR's spec
// (CAS: a restart is an outage, and on hardware a new image waits for its
// owners): while the CR's generation is the one the deployed revision was
// made for, the reconciler asks for that revision's own chart and values,
// so a new operator, with its newer chart and default image, leaves the
// running pods alone; drift is still repaired, to that revision. A spec
// change renders the operator's chart, with what Carry keeps from the
// deployed values.
type PinnedRelease interface {
	// Carry sets in values, computed for a changed spec, what the deployed
	// revision's values decided and the spec leaves open (the image an
	// empty spec.image resolved to).
	Carry(obj Object, deployed, values map[string]any)
}

// ValueSpecGeneration is the chart value, in a PinnedRelease's values,
// that records the CR generation the revision was made for.
const ValueSpecGeneration = "specGeneration"

// PostRenderer is a Kind that changes its rendered objects after the
// chart, with what only code computes from them (CAS's pod policy and its
// initdata, from its rendered pod template; a Vault's pods made
// confidential as cloister generate makes a workload's), given the
// release's values.
type PostRenderer interface {
	PostRender(obj Object, values map[string]any, u *unstructured.Unstructured) error
}

// Poller is a Kind whose health also comes from outside the cluster's
// objects (a service's own API, e.g. whether CAS is initialised): the
// reconciler looks again after PollAfter even when no watch fires.
type Poller interface {
	PollAfter(obj Object) time.Duration
}

// Announcer is a Kind with events of its own about its status fields
// (a NitroEnclaveDeployment's STATUS). The reconciler calls it after the
// status went from before to now in a successful write, so a pass on a
// stale copy, whose write conflicts, announces nothing twice.
type Announcer interface {
	Announce(rec events.EventRecorder, before, now Object)
}

// Drainer is a Kind whose release changed the nodes (a runtime handler in
// containerd): before it is uninstalled its pods must undo that, so
// deletion first rolls the release out in the kind's removal mode and
// waits until Drain says Drained, for DeletionTimeout at most.
type Drainer interface {
	Drain(ctx context.Context, obj Object, oos []Owned) (DrainState, string)
}

// ReleaseStatusFiller is a Kind whose own status fields also tell how its
// release fared (a NitroEnclaveDeployment whose Deployment could not be
// created shows ERROR): after FillStatus, it sees the ReleaseFailed
// observation.
type ReleaseStatusFiller interface {
	FillReleaseStatus(obj Object, oos []Owned, failed health.Observation)
}

// NoAutoUpdate is a Kind that spec.autoUpdate never changes (CAS: a new
// image is a new measurement, which its owners approve).
type NoAutoUpdate interface {
	NoAutoUpdate()
}

// Conditioner is a Kind with condition rows of its own (a Vault's:
// VaultAttested, VaultInitialized, ...), which FillStatus observed: the
// reconciler adds them to the observations after it.
type Conditioner interface {
	Conditions(obj Object) map[health.ConditionType]health.Observation
}

// ReadinessJudge is a Kind whose pods are not ready for a while by design
// (a Vault's, sealed until CAS unseals them) and whose own rows say why:
// a workload of it whose pods are not all ready is not UNHEALTHY for
// that alone: the kind's IsHealthy says PENDING or names a failure.
type ReadinessJudge interface {
	ReadinessJudge()
}
