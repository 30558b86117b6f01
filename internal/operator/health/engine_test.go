package health

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/cloister-cc/cloister/api/common"
)

const ds = "daemonset.apps/las"

// healthy builds observations of a CR in its desired state with the given
// OOs; with sets one condition (of the CR, or of the OO named by its ID
// prefix "oo:<id>:<type>") to another value.
func healthy(oos ...string) Observations {
	obs := Observations{CR: map[ConditionType]Observation{}}
	for _, t := range crConditions {
		obs.CR[t] = Observation{Status: table[t].healthy}
	}
	for _, id := range oos {
		oo := OwnedObject{ID: id, Conditions: map[ConditionType]Observation{}}
		for _, t := range ooConditions {
			oo.Conditions[t] = Observation{Status: table[t].healthy}
		}
		obs.OwnedObjects = append(obs.OwnedObjects, oo)
	}
	return obs
}

func (o Observations) with(target string, condType ConditionType, st metav1.ConditionStatus) Observations {
	if target == "" {
		o.CR[condType] = Observation{Status: st}
		return o
	}
	for _, oo := range o.OwnedObjects {
		if oo.ID == target {
			oo.Conditions[condType] = Observation{Status: st}
		}
	}
	return o
}

// A kind's own rows are shown only by the kind that observes them: the
// other kinds' tables stay as they are.
func TestKindConditionsOnlyWhenObserved(t *testing.T) {
	res := Evaluate(healthy(ds))
	for _, k := range kindConditions {
		if find(res.Conditions, string(k)) != nil {
			t.Errorf("condition %s shown without being observed", k)
		}
	}
	if res.State != common.StateHealthy {
		t.Errorf("state %s, want HEALTHY", res.State)
	}
	res = Evaluate(healthy(ds).with("", VaultQuorum, True))
	if c := find(res.Conditions, string(VaultQuorum)); c == nil || c.Status != True {
		t.Errorf("observed VaultQuorum = %+v, want True", c)
	}
}

// The conditions table, row by row: each value of each condition,
// all others healthy, gives the table's resulting state and action.
func TestConditionsTableRowByRow(t *testing.T) {
	const P, H, U = common.StatePending, common.StateHealthy, common.StateUnhealthy
	rows := []struct {
		oo     bool
		typ    ConditionType
		status metav1.ConditionStatus
		state  common.State
		action Action
	}{
		{false, IsHealthy, True, H, ActionNone},
		{false, IsHealthy, False, U, ActionNone},
		{false, IsHealthy, Unknown, P, ActionWait},
		{false, DeletionPresent, True, P, ActionUninstall},
		{false, DeletionPresent, False, H, ActionNone},
		{false, DeletionPresent, Unknown, P, ActionWait},
		{false, FinalizerPresent, True, H, ActionNone},
		{false, FinalizerPresent, False, P, ActionAddFinalizer},
		{false, FinalizerPresent, Unknown, P, ActionWait},
		{false, ReleaseExists, True, H, ActionNone},
		{false, ReleaseExists, False, P, ActionInstall},
		{false, ReleaseExists, Unknown, P, ActionWait},
		{false, ReleaseSteady, True, H, ActionNone},
		{false, ReleaseSteady, False, P, ActionWait},
		{false, ReleaseSteady, Unknown, P, ActionWait},
		{false, ReleaseFailed, True, P, ActionUninstallFailed},
		{false, ReleaseFailed, False, H, ActionNone},
		{false, ReleaseFailed, Unknown, P, ActionWait},
		{false, ReleaseDeployed, True, H, ActionNone},
		{false, ReleaseDeployed, False, P, ActionUpgrade},
		{false, ReleaseDeployed, Unknown, P, ActionWait},
		{false, ReleaseRolledBack, True, U, ActionNone},
		{false, ReleaseRolledBack, False, H, ActionNone},
		{false, ReleaseRolledBack, Unknown, P, ActionWait},
		{false, AtLeastOneOwnedObjectPresent, True, H, ActionNone},
		{false, AtLeastOneOwnedObjectPresent, False, P, ActionWait},
		{false, AtLeastOneOwnedObjectPresent, Unknown, P, ActionWait},
		{false, AllOwnedObjectsPresent, True, H, ActionNone},
		{false, AllOwnedObjectsPresent, False, P, ActionWait},
		{false, AllOwnedObjectsPresent, Unknown, P, ActionWait},
		{false, VaultAttested, True, H, ActionNone},
		{false, VaultAttested, False, U, ActionNone},
		{false, VaultAttested, Unknown, P, ActionWait},
		{false, VaultInitialized, True, H, ActionNone},
		{false, VaultInitialized, False, P, ActionWait},
		{false, VaultInitialized, Unknown, P, ActionWait},
		{false, VaultUnsealed, True, H, ActionNone},
		{false, VaultUnsealed, False, P, ActionWait},
		{false, VaultUnsealed, Unknown, P, ActionWait},
		{false, VaultQuorum, True, H, ActionNone},
		{false, VaultQuorum, False, P, ActionWait},
		{false, VaultQuorum, Unknown, P, ActionWait},
		{true, OwnedObjectHealthy, True, H, ActionNone},
		{true, OwnedObjectHealthy, False, U, ActionNone},
		{true, OwnedObjectHealthy, Unknown, P, ActionWait},
		{true, OwnedObjectPresent, True, H, ActionNone},
		{true, OwnedObjectPresent, False, P, ActionWait},
		{true, OwnedObjectPresent, Unknown, P, ActionWait},
		{true, OwnedObjectDeletionPresent, True, P, ActionWait},
		{true, OwnedObjectDeletionPresent, False, H, ActionNone},
		{true, OwnedObjectDeletionPresent, Unknown, P, ActionWait},
		{true, OwnedObjectValidOwners, True, H, ActionNone},
		{true, OwnedObjectValidOwners, False, P, ActionRemoveOwners},
		{true, OwnedObjectValidOwners, Unknown, P, ActionWait},
		{true, OwnsOwnedObject, True, H, ActionNone},
		{true, OwnsOwnedObject, False, P, ActionSetOwner},
		{true, OwnsOwnedObject, Unknown, P, ActionWait},
		{true, SoleOwner, True, H, ActionNone},
		{true, SoleOwner, False, P, ActionWait},
		{true, SoleOwner, Unknown, P, ActionWait},
		{true, EqualSpecs, True, H, ActionNone},
		{true, EqualSpecs, False, P, ActionUpgrade},
		{true, EqualSpecs, Unknown, P, ActionWait},
	}
	covered := map[ConditionType]int{}
	for _, r := range rows {
		name := string(r.typ) + "=" + string(r.status)
		t.Run(name, func(t *testing.T) {
			target, condType := "", string(r.typ)
			if r.oo {
				target = ds
				condType = OOConditionType(ds, r.typ)
			}
			res := Evaluate(healthy(ds).with(target, r.typ, r.status))
			if res.State != r.state || res.Action != r.action {
				t.Errorf("state %s action %s, want %s %s", res.State, res.Action, r.state, r.action)
			}
			if (r.action == ActionRemoveOwners || r.action == ActionSetOwner) && res.Target != ds {
				t.Errorf("action %s targets %q, want %q", res.Action, res.Target, ds)
			}
			c := find(res.Conditions, condType)
			if c == nil || c.Status != r.status {
				t.Fatalf("condition %s = %+v, want status %s", condType, c, r.status)
			}
			if c.Message != table[r.typ].explain[r.status] {
				t.Errorf("message %q, want the table's %q", c.Message, table[r.typ].explain[r.status])
			}
		})
		covered[r.typ]++
	}
	for t2 := range table {
		if covered[t2] != 3 {
			t.Errorf("table type %s has %d rows tested, want 3 (True, False, Unknown)", t2, covered[t2])
		}
	}
}

func TestActionPriorities(t *testing.T) {
	other := "serviceaccount/las"
	tests := []struct {
		name   string
		obs    Observations
		action Action
		target string
	}{
		{"uninstall before removing the finalizer and before adding one (1 < 2, 3)",
			healthy(ds).with("", DeletionPresent, True).with("", FinalizerPresent, False), ActionUninstall, ""},
		{"finalizer goes once the release is gone (2)",
			healthy().with("", DeletionPresent, True).with("", ReleaseExists, False), ActionRemoveFinalizer, ""},
		{"a deleted CR without finalizer and release needs nothing",
			healthy().with("", DeletionPresent, True).with("", ReleaseExists, False).with("", FinalizerPresent, False), ActionNone, ""},
		{"deleting with an unknown release waits",
			healthy().with("", DeletionPresent, True).with("", ReleaseExists, Unknown), ActionWait, ""},
		{"finalizer before installing (3 < 6)",
			healthy().with("", FinalizerPresent, False).with("", ReleaseExists, False), ActionAddFinalizer, ""},
		{"foreign owners before owning (4 < 5)",
			healthy(ds, other).with(ds, OwnsOwnedObject, False).with(other, OwnedObjectValidOwners, False), ActionRemoveOwners, other},
		{"owning before upgrading (5 < 9)",
			healthy(ds).with(ds, OwnsOwnedObject, False).with(ds, EqualSpecs, False), ActionSetOwner, ds},
		{"a missing OO cannot be owned: upgrade recreates it",
			healthy(ds).with(ds, OwnedObjectPresent, False).with(ds, OwnsOwnedObject, False).with(ds, EqualSpecs, False), ActionUpgrade, ""},
		{"install before waiting (6 < 7)",
			healthy().with("", ReleaseExists, False).with("", ReleaseSteady, False), ActionInstall, ""},
		{"wait for a release in transition before uninstalling it as failed (7 < 8)",
			healthy().with("", ReleaseSteady, False).with("", ReleaseFailed, True), ActionWait, ""},
		{"a failed release is uninstalled rather than upgraded (8 < 9)",
			healthy().with("", ReleaseFailed, True).with("", ReleaseDeployed, False), ActionUninstallFailed, ""},
		{"a change rolled back is not tried again, though the spec differs (until it changes)",
			healthy(ds).with("", ReleaseRolledBack, True).with(ds, EqualSpecs, False), ActionNone, ""},
		{"an unhealthy OO with a drifted spec is upgraded",
			healthy(ds).with(ds, OwnedObjectHealthy, False).with(ds, EqualSpecs, False), ActionUpgrade, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Evaluate(tt.obs)
			if res.Action != tt.action || res.Target != tt.target {
				t.Errorf("action %s on %q, want %s on %q", res.Action, res.Target, tt.action, tt.target)
			}
		})
	}
}

func TestStateRules(t *testing.T) {
	// Unknown outranks unhealthy: the state is only as sure as its inputs.
	res := Evaluate(healthy(ds).with("", IsHealthy, False).with(ds, OwnedObjectHealthy, Unknown))
	if res.State != common.StatePending {
		t.Errorf("unhealthy and unknown = %s, want PENDING", res.State)
	}
	// Unhealthy outranks pending.
	res = Evaluate(healthy(ds).with(ds, OwnedObjectHealthy, False).with("", ReleaseSteady, False))
	if res.State != common.StateUnhealthy {
		t.Errorf("unhealthy and in transition = %s, want UNHEALTHY", res.State)
	}
	// A condition that was not observed is Unknown.
	obs := healthy(ds)
	delete(obs.CR, ReleaseDeployed)
	res = Evaluate(obs)
	if c := find(res.Conditions, ReleaseDeployed); c.Status != Unknown || c.Reason != "NotObserved" || res.State != common.StatePending {
		t.Errorf("unobserved ReleaseDeployed = %+v, state %s", c, res.State)
	}
	// Only everything at its desired value is HEALTHY.
	if res := Evaluate(healthy(ds, "configmap/las")); res.State != common.StateHealthy || res.Action != ActionNone {
		t.Errorf("all desired = %s %s", res.State, res.Action)
	}
}

func TestConditionsAreValidAndOrdered(t *testing.T) {
	obs := healthy("serviceaccount/las", ds)
	obs.CR[IsHealthy] = Obs(False, "SGXDeviceAlert", "2 nodes have no free SGX device")
	obs.CR[ReleaseSteady] = Obs(True, "not a valid reason!", "")
	res := Evaluate(obs)
	if len(res.Conditions) != len(crConditions)+2*len(ooConditions) {
		t.Fatalf("%d conditions, want %d", len(res.Conditions), len(crConditions)+2*len(ooConditions))
	}
	for i, c := range res.Conditions {
		c.LastTransitionTime = metav1.Now() // the controller's part
		if errs := metav1validation.ValidateCondition(c, field.NewPath("status", "conditions").Index(i)); len(errs) > 0 {
			t.Errorf("condition %+v invalid: %v", c, errs)
		}
	}
	if res.Conditions[0].Type != string(IsHealthy) || res.Conditions[len(crConditions)].Type != OOConditionType(ds, OwnedObjectHealthy) ||
		res.Conditions[len(crConditions)+len(ooConditions)].Type != OOConditionType("serviceaccount/las", OwnedObjectHealthy) {
		t.Errorf("order: %s, %s, %s", res.Conditions[0].Type, res.Conditions[len(crConditions)].Type,
			res.Conditions[len(crConditions)+len(ooConditions)].Type)
	}
	c := find(res.Conditions, IsHealthy)
	if c.Reason != "SGXDeviceAlert" || !strings.HasSuffix(c.Message, ": 2 nodes have no free SGX device") {
		t.Errorf("observer's reason and message lost: %+v", c)
	}
	if c := find(res.Conditions, ReleaseSteady); c.Reason != "AsExpected" {
		t.Errorf("invalid reason not replaced: %+v", c)
	}
}

func TestObjectID(t *testing.T) {
	if got := ObjectID("apps", "DaemonSet", "las"); got != "daemonset.apps/las" {
		t.Errorf("ObjectID = %q", got)
	}
	if got := ObjectID("", "ServiceAccount", "las"); got != "serviceaccount/las" {
		t.Errorf("ObjectID = %q", got)
	}
}

func find[T ~string](cs []metav1.Condition, t T) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == string(t) {
			return &cs[i]
		}
	}
	return nil
}

func TestIsDesired(t *testing.T) {
	for _, tt := range []struct {
		c    metav1.Condition
		want bool
	}{
		{metav1.Condition{Type: string(IsHealthy), Status: True}, true},
		{metav1.Condition{Type: string(ReleaseFailed), Status: True}, false},
		{metav1.Condition{Type: string(ReleaseFailed), Status: False}, true},
		{metav1.Condition{Type: "daemonset.apps/las-x.OwnedObjectDeletionPresent", Status: False}, true},
		{metav1.Condition{Type: "daemonset.apps/las-x.EqualSpecs", Status: Unknown}, false},
		{metav1.Condition{Type: "Ready", Status: True}, false},
	} {
		if got := IsDesired(tt.c); got != tt.want {
			t.Errorf("IsDesired(%s=%s) = %v", tt.c.Type, tt.c.Status, got)
		}
	}
}
