package generate

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPortForwarderAdded(t *testing.T) {
	in := annotate(threeTier, PortForwardAnnotation, "8080,443")
	out, _ := rewrite(t, in, meshOptions())
	docs := strings.Split(out, "\n---\n")
	var fwd corev1.Pod
	doc(t, out, len(docs)-1, &fwd)
	c := fwd.Spec.Containers
	if fwd.Name != "port-forwarder-web" || fwd.Namespace != "shop" || fwd.Labels[ForwarderFor] != "shop-deployment-web" || len(c) != 1 {
		t.Fatalf("forwarder %+v", fwd)
	}
	if strings.Join(c[0].Args, " ") != "forward --to web.shop.svc --port 8080 --port 443" || c[0].Image != meshImage {
		t.Errorf("forwarder container %+v", c[0])
	}
	if fwd.Spec.RuntimeClassName != nil || *fwd.Spec.AutomountServiceAccountToken || !*fwd.Spec.SecurityContext.RunAsNonRoot ||
		c[0].SecurityContext.Capabilities.Add[0] != "NET_BIND_SERVICE" || *c[0].SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("an ordinary, restricted pod: %+v %+v", fwd.Spec, c[0].SecurityContext)
	}
	if again, _ := rewrite(t, out, meshOptions()); again != out {
		t.Errorf("a second run changed the stream:\n%s", again)
	}
	// The annotation taken out, the forwarder goes.
	without := strings.Replace(out, "        "+PortForwardAnnotation+": \"8080,443\"\n", "", 1)
	if without == out {
		t.Fatal("the annotation was not found to take out")
	}
	if gone, _ := rewrite(t, without, meshOptions()); strings.Contains(gone, "port-forwarder-web") {
		t.Errorf("the forwarder stayed:\n%s", gone)
	}
}

func TestPortForwarderRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"no Service", strings.Replace(annotate(threeTier, PortForwardAnnotation, "8080"), "  selector:\n    app: web\n", "  selector:\n    app: other\n", 1), "no Service of the YAML selects the pods"},
		{"not a port", annotate(threeTier, PortForwardAnnotation, "80a"), `"80a" is not a port`},
		{"a port twice", annotate(threeTier, PortForwardAnnotation, "80,80"), "port 80 twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := Rewrite(context.Background(), []byte(tc.in), meshOptions()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
