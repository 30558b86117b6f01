package conn

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/wire"
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

// A CAS in a confidential VM is trusted by its measurement and the host
// data of its own pod policy (status.hostData): a pod of the same runtime
// class (the same measurement, another host data) is not CAS, on SEV-SNP
// and on TDX (where RTMR0-2 count too), and before the operator published
// the host data nothing is.
func TestExpectPinsTheHostData(t *testing.T) {
	fill := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	hexOf := func(b byte, n int) string { return hex.EncodeToString(fill(b, n)) }
	for _, platform := range []string{"snp", "tdx"} {
		cr := &servicesv1beta1.CAS{Spec: servicesv1beta1.CASSpec{ConfidentialVM: &servicesv1beta1.CASConfidentialVM{
			Platform: platform, RuntimeClassName: "kata-" + platform, Measurement: hexOf(0xAA, 48)}}}
		if platform == "tdx" {
			cr.Spec.ConfidentialVM.RTMRs = []string{hexOf(1, 48), hexOf(2, 48), hexOf(3, 48)}
		}
		claims := func(hostData byte, rtmr1 byte) *attest.Claims {
			c := &attest.Claims{TCBStatus: attest.TCBUpToDate}
			if platform == "snp" {
				c.Type, c.SNP = attest.SNP, &attest.SNPIdentity{Measurement: fill(0xAA, 48), HostData: fill(hostData, 32)}
			} else {
				c.Type, c.TDX = attest.TDX, &attest.TDXIdentity{MRTD: fill(0xAA, 48), MRCONFIGID: append(fill(hostData, 32), make([]byte, 16)...),
					RTMR: [4]attest.Bytes{fill(1, 48), fill(rtmr1, 48), fill(3, 48), fill(9, 48)}}
			}
			return c
		}
		e := Expect(cr)
		if err := e.Policy.Check(claims(0xCA, 2)); attest.CheckOf(err) != attest.CheckIdentity {
			t.Errorf("%s: CAS before its host data was published: %v", platform, err)
		}
		cr.Status.HostData = hexOf(0xCA, 32)
		e = Expect(cr)
		if err := wire.CheckCASPolicy(&e.Policy); err != nil {
			t.Errorf("%s: the operator's expectation pins too little: %v", platform, err)
		}
		if err := e.Policy.Check(claims(0xCA, 2)); err != nil {
			t.Errorf("%s: CAS itself: %v", platform, err)
		}
		if err := e.Policy.Check(claims(0xBB, 2)); attest.CheckOf(err) != attest.CheckIdentity {
			t.Errorf("%s: another pod of CAS's runtime class: %v", platform, err)
		}
		if platform == "tdx" {
			if err := e.Policy.Check(claims(0xCA, 7)); attest.CheckOf(err) != attest.CheckIdentity {
				t.Errorf("tdx: another kernel (RTMR1): %v", err)
			}
		}
	}
}
