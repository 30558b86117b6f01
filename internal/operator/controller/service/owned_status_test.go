package service

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cloister-cc/cloister/internal/operator/health"
)

const crUID types.UID = "cr-uid"

// Builders of owned objects, as cert-manager's tests build theirs.

func configMap(data string, opts ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "test-x", "namespace": "ops"},
		"data":     map[string]any{"image": data},
	}}
	for _, o := range opts {
		o(u)
	}
	return u
}

func ownedBy(uids ...types.UID) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		var refs []metav1.OwnerReference
		for _, uid := range uids {
			refs = append(refs, metav1.OwnerReference{APIVersion: "v1", Kind: "X", Name: string(uid), UID: uid})
		}
		u.SetOwnerReferences(refs)
	}
}

func deleting(u *unstructured.Unstructured) {
	now := metav1.Now()
	u.SetDeletionTimestamp(&now)
}

func daemonSet(generation, observed int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": "test-x", "namespace": "ops", "generation": generation},
		"status":   map[string]any{"observedGeneration": observed},
	}}
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "X", Name: "cr", UID: crUID}})
	return u
}

func statefulSet(generation, observed int64, ready, updated int64) *unstructured.Unstructured {
	u := daemonSet(generation, observed)
	u.SetKind("StatefulSet")
	u.Object["spec"] = map[string]any{"replicas": int64(1)}
	u.Object["status"] = map[string]any{"observedGeneration": observed, "readyReplicas": ready, "updatedReplicas": updated}
	return u
}

// One row per way an owned object can be: the conditions it gets.
func TestOwnedConditions(t *testing.T) {
	desired := configMap("example.com/test:1")
	type want map[health.ConditionType]string // "Status/Reason", or "Status" for any reason
	rows := []struct {
		name      string
		oo        Owned
		installed bool
		want      want
	}{
		{"unreadable", Owned{Desired: desired, Deployed: desired, ReadErr: errors.New("forbidden")}, true, want{
			health.OwnedObjectPresent: "Unknown/ReadError", health.EqualSpecs: "Unknown/NotPresent", health.SoleOwner: "Unknown/NotPresent"}},
		{"missing from an installed release", Owned{Desired: desired, Deployed: desired}, true, want{
			health.OwnedObjectPresent: "False/NotFound", health.EqualSpecs: "False/Missing", health.OwnedObjectHealthy: "False/Missing",
			health.OwnsOwnedObject: "Unknown/NotPresent"}},
		{"not yet installed", Owned{Desired: desired}, false, want{
			health.OwnedObjectPresent: "False/NotFound", health.OwnedObjectHealthy: "Unknown/NotInstalled"}},
		{"as desired", Owned{Desired: desired, Deployed: desired, Live: configMap("example.com/test:1", ownedBy(crUID))}, true, want{
			health.OwnedObjectPresent: "True/Found", health.OwnedObjectDeletionPresent: "False", health.OwnedObjectValidOwners: "True/Owners",
			health.OwnsOwnedObject: "True/Owner", health.SoleOwner: "True/Owner", health.EqualSpecs: "True", health.OwnedObjectHealthy: "True"}},
		{"a foreign owner besides the CR", Owned{Desired: desired, Deployed: desired, Live: configMap("example.com/test:1", ownedBy(crUID, "other"))}, true, want{
			health.OwnedObjectValidOwners: "False/Owners", health.OwnsOwnedObject: "True/Owner", health.SoleOwner: "False/Owner"}},
		{"owned by another alone", Owned{Desired: desired, Deployed: desired, Live: configMap("example.com/test:1", ownedBy("other"))}, true, want{
			health.OwnedObjectValidOwners: "True/Owners", health.OwnsOwnedObject: "False/Owner", health.SoleOwner: "False/Owner"}},
		{"being deleted", Owned{Desired: desired, Deployed: desired, Live: configMap("example.com/test:1", ownedBy(crUID), deleting)}, true, want{
			health.OwnedObjectDeletionPresent: "True/Deleting"}},
		{"no longer rendered", Owned{Deployed: desired, Live: configMap("example.com/test:1", ownedBy(crUID))}, true, want{
			health.EqualSpecs: "False/NotInSpec"}},
		{"the spec renders it differently", Owned{Desired: configMap("example.com/test:2"), Deployed: desired, Live: configMap("example.com/test:1", ownedBy(crUID))}, true, want{
			health.EqualSpecs: "False/SpecChanged"}},
		{"drifted in the cluster", Owned{Desired: desired, Deployed: desired, Live: configMap("evil.example.com/miner:6", ownedBy(crUID))}, true, want{
			health.EqualSpecs: "False/Drifted"}},
		{"a DaemonSet not yet rolled out", Owned{Desired: daemonSet(2, 1), Deployed: daemonSet(2, 1), Live: daemonSet(2, 1)}, true, want{
			health.OwnedObjectHealthy: "Unknown/RolloutPending"}},
		{"a StatefulSet not yet rolled out", Owned{Desired: statefulSet(2, 1, 1, 1), Deployed: statefulSet(2, 1, 1, 1), Live: statefulSet(2, 1, 1, 1)}, true, want{
			health.OwnedObjectHealthy: "Unknown/RolloutPending"}},
		{"a StatefulSet whose pod is not ready", Owned{Desired: statefulSet(2, 2, 0, 1), Deployed: statefulSet(2, 2, 0, 1), Live: statefulSet(2, 2, 0, 1)}, true, want{
			health.OwnedObjectHealthy: "False/PodsUnavailable"}},
		{"a StatefulSet ready", Owned{Desired: statefulSet(2, 2, 1, 1), Deployed: statefulSet(2, 2, 1, 1), Live: statefulSet(2, 2, 1, 1)}, true, want{
			health.OwnedObjectHealthy: "True/PodsAvailable"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			got := ownedConditions(crUID, row.oo, row.installed)
			if len(got) != 7 {
				t.Errorf("%d conditions, want all 7 of an owned object: %v", len(got), got)
			}
			for ct, w := range row.want {
				o := got[ct]
				if s := string(o.Status) + "/" + string(o.Reason); s != w && string(o.Status) != w {
					t.Errorf("%s = %s (%s), want %s", ct, s, o.Message, w)
				}
			}
		})
	}
}

func TestPresence(t *testing.T) {
	here, gone := Owned{Live: configMap("a")}, Owned{}
	one, all := presence([]Owned{here, gone})
	if one.Status != health.True || all.Status != health.False || all.Message != "1 of 2 present" {
		t.Errorf("1 of 2: %+v %+v", one, all)
	}
	one, all = presence([]Owned{here, {ReadErr: errors.New("timeout")}})
	if one.Status != health.Unknown || all.Status != health.Unknown {
		t.Errorf("a read error: %+v %+v", one, all)
	}
}
