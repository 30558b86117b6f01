// Package prometheus holds the PrometheusRule of Cloister's alerts; its
// test keeps the rule in step with the API's alert fields.
package prometheus

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/operator/metrics"
)

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// alertFields are the status fields named *Alert of every kind with alerts.
func alertFields(t *testing.T) []string {
	t.Helper()
	var fields []string
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for i := range ty.NumField() {
			f := ty.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			if strings.HasSuffix(name, "Alert") {
				fields = append(fields, name)
			}
		}
	}
	for _, st := range []any{basev1beta1.SGXPluginStatus{}, basev1beta1.LASStatus{}, basev1beta1.CEXPluginStatus{}, basev1beta1.NitroPluginStatus{}, basev1beta1.ConfidentialRuntimeStatus{}, servicesv1beta1.CASStatus{}, servicesv1beta1.VaultStatus{}} {
		walk(reflect.TypeOf(st))
	}
	if len(fields) < 5 {
		t.Fatalf("found only alert fields %v", fields)
	}
	return fields
}

func TestOneAlertPerAlertField(t *testing.T) {
	data, err := os.ReadFile("../../charts/cloister-operator/files/prometheus/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(data, &pr); err != nil {
		t.Fatalf("rules.yaml: %v", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("rules.yaml is %s %s", pr.APIVersion, pr.Kind)
	}
	byField := map[string]rule{}
	names := map[string]bool{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if names[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			names[r.Alert] = true
			if _, dup := byField[r.Labels["field"]]; dup {
				t.Errorf("two alerts for field %q", r.Labels["field"])
			}
			byField[r.Labels["field"]] = r
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" || r.For == "" || r.Labels["severity"] == "" {
				t.Errorf("alert %s lacks summary, description, for or severity", r.Alert)
			}
		}
	}
	for _, field := range append(alertFields(t), "state") {
		r, ok := byField[field]
		if !ok {
			t.Errorf("no alert for status field %s", field)
			continue
		}
		metric := metrics.MetricName(field)
		if field == "state" {
			metric = "cloister_state"
		}
		if !strings.HasPrefix(r.Expr, metric+"{") {
			t.Errorf("alert %s: expr %q does not use gauge %s", r.Alert, r.Expr, metric)
		}
	}
	if len(byField) != len(alertFields(t))+1 {
		t.Errorf("%d alerts for %d alert fields and state: an alert without a field?", len(byField), len(alertFields(t)))
	}
}
