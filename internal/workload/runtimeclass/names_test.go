package runtimeclass

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestClassNamesAreValidAndVersioned(t *testing.T) {
	a, b := ClassName("sim", "v1.2.3"), ClassName("sim", "v1.2.4-3-gabcdef+dirty")
	if a == b {
		t.Fatalf("two versions share %q", a)
	}
	for _, n := range []string{a, b, ClassName("snp", "devel")} {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 || len(n) > 63 {
			t.Errorf("%q: %v", n, errs)
		}
	}
	if ClassName("sim", "v1.2.3") != a {
		t.Error("not deterministic")
	}
}
