package health

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/api/common"
)

// Action is what the controller does next. The value is the action's
// priority: when several apply, the lowest number is taken.
type Action int

// The actions of the table, by priority; ActionNone means nothing is
// to be done until something changes.
const (
	ActionNone            Action = 0
	ActionUninstall       Action = 1
	ActionRemoveFinalizer Action = 2
	ActionAddFinalizer    Action = 3
	ActionRemoveOwners    Action = 4
	ActionSetOwner        Action = 5
	ActionInstall         Action = 6
	ActionWait            Action = 7
	ActionUninstallFailed Action = 8
	ActionUpgrade         Action = 9
	actionCount                  = 10
)

// metav1.Condition limits a reason to 1024 characters.
const maxReasonLength = 1024

var actionNames = [actionCount]string{
	"None", "UninstallRelease", "RemoveFinalizer", "AddFinalizer", "RemoveForeignOwners",
	"SetOwner", "InstallRelease", "Wait", "UninstallFailedRelease", "UpgradeRelease",
}

func (a Action) String() string {
	if a < 0 || a >= actionCount {
		return fmt.Sprintf("Action(%d)", int(a))
	}
	return actionNames[a]
}

// Observation is the observed value of one condition. Reason and Message
// are optional: the table's explanation is the default message.
type Observation struct {
	Status  metav1.ConditionStatus
	Reason  Reason
	Message string
}

// Obs is shorthand for an Observation.
func Obs(status metav1.ConditionStatus, reason Reason, message string) Observation {
	return Observation{Status: status, Reason: reason, Message: message}
}

// OwnedObject is what was observed of one OO.
type OwnedObject struct {
	// ID names the OO uniquely among the CR's OOs; see ObjectID.
	ID         string
	Conditions map[ConditionType]Observation
}

// Observations are the inputs of Evaluate. A condition that was not
// observed counts as Unknown.
type Observations struct {
	CR           map[ConditionType]Observation
	OwnedObjects []OwnedObject
}

// Result is the status to write and the action to take.
type Result struct {
	// Conditions without timestamps, CR conditions first in table order,
	// then each OO's (sorted by ID) prefixed with its ID.
	Conditions []metav1.Condition
	State      common.State
	Action     Action
	// Target is the ID of the OO that ActionRemoveOwners or ActionSetOwner
	// applies to.
	Target string
}

// ObjectID names an OO for condition types: lowercase kind, its API group
// if any, "/" and the object's name, e.g. "daemonset.apps/las". It is the
// prefix metav1.Condition allows (a DNS subdomain) before the "/".
func ObjectID(group, kind, name string) string {
	id := strings.ToLower(kind)
	if group != "" {
		id += "." + group
	}
	return id + "/" + name
}

// OOConditionType is the type under which the CR shows an OO's condition,
// e.g. "daemonset.apps/las.OwnedObjectHealthy".
func OOConditionType(id string, conditionType ConditionType) string {
	return id + "." + string(conditionType)
}

// Evaluate applies the table to the observations.
func Evaluate(obs Observations) Result {
	ooList := slices.Clone(obs.OwnedObjects)
	slices.SortFunc(ooList, func(a, b OwnedObject) int { return strings.Compare(a.ID, b.ID) })

	cr := func(t ConditionType) metav1.ConditionStatus { return status(obs.CR, t) }
	var res Result
	var unknown, unhealthy, pending bool
	add := func(condType string, tableType ConditionType, o map[ConditionType]Observation) {
		c := condition(condType, tableType, o[tableType], o != nil && has(o, tableType))
		switch def := table[tableType]; {
		case c.Status == Unknown:
			unknown = true
		case c.Status != def.healthy && def.unhealthy:
			unhealthy = true
		case c.Status != def.healthy:
			pending = true
		}
		res.Conditions = append(res.Conditions, c)
	}
	for _, t := range crConditions {
		add(string(t), t, obs.CR)
	}
	for _, t := range kindConditions {
		if has(obs.CR, t) {
			add(string(t), t, obs.CR)
		}
	}
	for _, oo := range ooList {
		for _, t := range ooConditions {
			add(OOConditionType(oo.ID, t), t, oo.Conditions)
		}
	}

	switch {
	case unknown:
		res.State = common.StatePending
	case unhealthy:
		res.State = common.StateUnhealthy
	case pending:
		res.State = common.StatePending
	default:
		res.State = common.StateHealthy
	}

	res.Action, res.Target = nextAction(cr, ooList)
	if res.Action == ActionNone && res.State == common.StatePending && cr(DeletionPresent) != True {
		// Something is unknown or settling with nothing to do about it:
		// look again after a (bounded) delay instead of waiting for an event.
		res.Action = ActionWait
	}
	return res
}

// nextAction picks the highest-priority action the table names.
func nextAction(cr func(ConditionType) metav1.ConditionStatus, oos []OwnedObject) (Action, string) {
	if cr(DeletionPresent) == True {
		switch cr(ReleaseExists) {
		case True:
			return ActionUninstall, ""
		case False:
			if cr(FinalizerPresent) == True {
				return ActionRemoveFinalizer, ""
			}
			return ActionNone, ""
		default:
			return ActionWait, ""
		}
	}
	if cr(FinalizerPresent) == False {
		return ActionAddFinalizer, ""
	}
	for _, oo := range oos {
		if status(oo.Conditions, OwnedObjectValidOwners) == False {
			return ActionRemoveOwners, oo.ID
		}
	}
	for _, oo := range oos {
		if status(oo.Conditions, OwnedObjectPresent) == True && status(oo.Conditions, OwnsOwnedObject) == False {
			return ActionSetOwner, oo.ID
		}
	}
	if cr(ReleaseExists) == False {
		return ActionInstall, ""
	}
	if cr(ReleaseSteady) == False {
		return ActionWait, ""
	}
	if cr(ReleaseFailed) == True {
		return ActionUninstallFailed, ""
	}
	if cr(ReleaseRolledBack) == True {
		// The spec that failed is not tried again until it (or the
		// chart) changes.
		return ActionNone, ""
	}
	if cr(ReleaseExists) != True {
		return ActionNone, ""
	}
	if cr(ReleaseDeployed) == False {
		return ActionUpgrade, ""
	}
	for _, oo := range oos {
		if status(oo.Conditions, EqualSpecs) == False {
			return ActionUpgrade, ""
		}
	}
	return ActionNone, ""
}

func has(m map[ConditionType]Observation, t ConditionType) bool {
	_, ok := m[t]
	return ok
}

func status(m map[ConditionType]Observation, t ConditionType) metav1.ConditionStatus {
	if o, ok := m[t]; ok && (o.Status == True || o.Status == False) {
		return o.Status
	}
	return Unknown
}

var reasonRE = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// condition builds the condition shown for one observation, filling in the
// table's explanation and a valid reason where the observer gave none.
func condition(condType string, tableType ConditionType, o Observation, observed bool) metav1.Condition {
	def := table[tableType]
	st := o.Status
	if st != True && st != False {
		st = Unknown
	}
	reason := string(o.Reason)
	if !reasonRE.MatchString(reason) || len(reason) > maxReasonLength {
		switch {
		case !observed:
			reason = "NotObserved"
		case st == def.healthy:
			reason = "AsExpected"
		case st == Unknown:
			reason = "Unknown"
		default:
			reason = string(tableType) + string(st)
		}
	}
	msg := def.explain[st]
	if o.Message != "" {
		msg += ": " + o.Message
	}
	return metav1.Condition{Type: condType, Status: st, Reason: reason, Message: msg}
}

// IsDesired reports whether a condition Evaluate produced (CR or OO,
// prefixed or not) has the value a HEALTHY CR shows.
func IsDesired(c metav1.Condition) bool {
	t := c.Type
	if slash := strings.LastIndex(t, "/"); slash >= 0 {
		if dot := strings.LastIndex(t, "."); dot > slash {
			t = t[dot+1:]
		}
	}
	def, ok := table[ConditionType(t)]
	return ok && c.Status == def.healthy
}
