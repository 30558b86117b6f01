package charts

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// operationsOf maps a role's verbs onto the admission operations they lead
// to; reading verbs lead to none.
func operationsOf(verbs []string) []admissionregistrationv1.OperationType {
	var ops []admissionregistrationv1.OperationType
	add := func(op admissionregistrationv1.OperationType) {
		if !slices.Contains(ops, op) {
			ops = append(ops, op)
		}
	}
	for _, v := range verbs {
		switch v {
		case "create":
			add(admissionregistrationv1.Create)
		case "update", "patch":
			add(admissionregistrationv1.Update)
		case "delete", "deletecollection":
			add(admissionregistrationv1.Delete)
		case "*":
			add(admissionregistrationv1.Create)
			add(admissionregistrationv1.Update)
			add(admissionregistrationv1.Delete)
		}
	}
	return ops
}

// covers says whether a policy rule matches op on group/resource.
func covers(r admissionregistrationv1.NamedRuleWithOperations, group, resource string, op admissionregistrationv1.OperationType) bool {
	any := func(list []string, want string) bool {
		return slices.Contains(list, "*") || slices.Contains(list, want)
	}
	opOK := slices.Contains(r.Operations, admissionregistrationv1.OperationAll) || slices.Contains(r.Operations, op)
	resOK := slices.Contains(r.Resources, resource) ||
		(!strings.Contains(resource, "/") && slices.Contains(r.Resources, "*"))
	return opOK && any(r.APIGroups, group) && resOK
}

// Every write the operator's roles allow is bounded by an admission policy,
// or is on the short list below with the reason it needs none: a verb added
// to a role (a kubebuilder marker) without a rule fails here.
func TestAdmissionCoversEveryWriteOfTheRoles(t *testing.T) {
	objs := renderOperatorIn(t, opNS, map[string]any{})
	var rules []admissionregistrationv1.NamedRuleWithOperations
	policies := 0
	// Policies that bound other identities than the operator's.
	others := map[string]string{
		"ValidatingAdmissionPolicy/cloister-operator-cex-config-sets": "tenants' claims of a CEX config set",
	}
	for key, o := range objs {
		if o.GetKind() != "ValidatingAdmissionPolicy" || others[key] != "" {
			continue
		}
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if len(p.Spec.MatchConditions) == 0 || !strings.Contains(p.Spec.MatchConditions[0].Expression, "operatorwrites") {
			t.Errorf("%s does not match every identity holding the operator's roles: %v", key, p.Spec.MatchConditions)
		}
		rules = append(rules, p.Spec.MatchConstraints.ResourceRules...)
		policies++
	}
	if policies == 0 {
		t.Fatal("the chart renders no admission policy")
	}
	// Writes no policy needs to bound, and why.
	exempt := func(r rbacv1.PolicyRule, group, resource string) string {
		switch {
		case group == "authentication.k8s.io" && resource == "tokenreviews",
			group == "authorization.k8s.io" && resource == "subjectaccessreviews":
			return "a review: nothing is stored"
		case group == "admissionregistration.k8s.io" && len(r.ResourceNames) > 0:
			return "only its own webhook configurations, by name"
		case strings.HasSuffix(group, ".cloister.dev") &&
			(strings.HasSuffix(resource, "/status") || strings.HasSuffix(resource, "/finalizers")):
			return "a Cloister resource's status and finalizers are the operator's"
		}
		return ""
	}
	checked := 0
	for _, key := range []string{"ClusterRole/cloister-operator", "Role/cloister-operator"} {
		o := objs[key]
		if o == nil {
			t.Fatalf("the chart renders no %s", key)
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		for _, r := range role.Rules {
			ops := operationsOf(r.Verbs)
			for _, group := range r.APIGroups {
				for _, resource := range r.Resources {
					if len(ops) == 0 || exempt(r, group, resource) != "" {
						continue
					}
					for _, op := range ops {
						checked++
						if !slices.ContainsFunc(rules, func(pr admissionregistrationv1.NamedRuleWithOperations) bool {
							return covers(pr, group, resource, op)
						}) {
							t.Errorf("%s lets the operator %s %s in group %q, and no admission policy bounds it", key, op, resource, group)
						}
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d writes checked: the roles were not read", checked)
	}
}
