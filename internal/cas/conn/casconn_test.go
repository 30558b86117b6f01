package conn

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseAddress(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Ref
		err  string
	}{
		{in: "cas-sample.default.svc:8081", want: Ref{"default", "cas-sample", 8081}},
		{in: "https://cas.team-a.svc.cluster.local:18765/", want: Ref{"team-a", "cas", 18765}},
		{in: "cas.team-a:8081", want: Ref{"team-a", "cas", 8081}},
		{in: "cas.default.svc", err: "missing port"},
		{in: "cas:8081", err: "use NAME.NAMESPACE.svc:PORT"},
		{in: "cas.example.com.svc:8081", err: "use NAME.NAMESPACE.svc:PORT"},
		{in: "Cas.default.svc:8081", err: "RFC 1123"},
		{in: "cas.default.svc:http", err: `port "http"`},
		{in: "cas.default.svc:0", err: `port "0"`},
	} {
		got, err := ParseAddress(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "casAddress") {
				t.Errorf("%q: %v, want an error naming casAddress and %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: %+v %v, want %+v", tt.in, got, err, tt.want)
		}
	}
	if got := (Ref{"default", "cas", 8081}).URL(); got != "https://cas.default.svc:8081" {
		t.Errorf("URL %s", got)
	}
}

func TestParseRef(t *testing.T) {
	if r, err := ParseRef("team-a/cas"); err != nil || r != (Ref{"team-a", "cas", 8081}) {
		t.Errorf("team-a/cas: %+v %v", r, err)
	}
	for _, bad := range []string{"cas", "/cas", "ns/", "a/b/c"} {
		if _, err := ParseRef(bad); err == nil || !strings.Contains(err.Error(), "NAMESPACE/NAME") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestPodAddress(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: PodName("cas")}}
	if _, err := PodAddress(pod); err == nil || !strings.Contains(err.Error(), "pod ns/cas-cas-0 is not scheduled") {
		t.Errorf("unscheduled: %v", err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3"}
	if a, err := PodAddress(pod); err != nil || a != "10.1.2.3:8081" {
		t.Errorf("running: %s %v", a, err)
	}
	pod.DeletionTimestamp = &metav1.Time{}
	if _, err := PodAddress(pod); err == nil || !strings.Contains(err.Error(), "terminating") {
		t.Errorf("terminating: %v", err)
	}
}
