package annotation

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// Contrast's documented mesh example (three tiers: main with TLS, metrics
// plain, an egress to backend), exactly.
func TestContrastExample(t *testing.T) {
	cfg, present, err := FromAnnotations(map[string]string{
		ContrastIngressAnnotation: "main#8001#false##metrics#8080#true",
		ContrastEgressAnnotation:  "backend#127.0.0.2:4001#backend.default:4001",
	})
	if err != nil || !present {
		t.Fatal(present, err)
	}
	want := Config{
		Ingress: IngressConfig{Ports: []Ingress{{"main", 8001, ServerTLS}, {"metrics", 8080, Plain}}},
		Egress:  []Egress{{"backend", netip.MustParseAddrPort("127.0.0.2:4001"), "backend.default:4001"}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("%+v, want %+v", cfg, want)
	}
	if got := cfg.Ingress.PlainPorts(); len(got) != 1 || got[0] != 8080 {
		t.Errorf("plain ports %v", got)
	}
}

func TestIngressGrammar(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  IngressConfig
		err   string
	}{
		{value: "", want: IngressConfig{}},
		{value: "DISABLED", want: IngressConfig{Disabled: true}},
		{value: "web#443#false", want: IngressConfig{Ports: []Ingress{{"web", 443, ServerTLS}}}},
		{value: "main#8001#false##", err: `ingress entry 2 is empty`},
		{value: "main#8001", err: `ingress entry 1 "main#8001": want name#port#disableTLS (e.g. main#8001#false), got 2 fields`},
		{value: "main#80801#false", err: `port "80801" is not a port (1-65535)`},
		{value: "main#0#false", err: `port "0" is not a port`},
		{value: "main#080#false", err: `port "080" is not a port`},
		{value: "main#8001#yes", err: `disableTLS "yes" must be true (plain) or false`},
		{value: "Main#8001#true", err: `name "Main" must be 1-63 lowercase letters`},
		{value: "a#1#true##a#2#true", err: `ingress entry 2 "a#2#true": name a is used twice`},
		{value: "a#1#true##b#1#false", err: `port 1 is listed twice`},
		{value: "disabled", err: `want name#port#disableTLS`},
		{value: "admin#15000#true", err: `port 15000 is the mesh proxy's own (15000 and 15006 are reserved)`},
		{value: "proxy#15006#false", err: `port 15006 is the mesh proxy's own`},
	} {
		got, err := ParseIngress(tc.value)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error saying %q", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %+v %v, want %+v", tc.value, got, err, tc.want)
		}
		if s := got.String(); s != tc.value {
			t.Errorf("%q formats as %q", tc.value, s)
		}
	}
}

func TestEgressGrammar(t *testing.T) {
	for _, tc := range []struct {
		value string
		err   string
	}{
		{value: "backend#127.0.0.2:4001#backend.default:4001"},
		{value: "db#127.1.2.3:5432#10.0.0.7:5432##cache#127.0.0.3:6379#redis.cache.svc.cluster.local:6379"},
		{value: "backend#10.0.0.1:4001#backend:4001", err: `listen address "10.0.0.1:4001" must be an IPv4 loopback address`},
		{value: "backend#[::1]:4001#backend:4001", err: "must be an IPv4 loopback address"},
		{value: "backend#127.0.0.2#backend:4001", err: "must be an IPv4 loopback address with a port"},
		{value: "backend#127.0.0.2:4001#backend", err: `upstream "backend" must be host:port`},
		{value: "backend#127.0.0.2:4001#Back_end:4001", err: `upstream host "Back_end" is neither`},
		{value: "backend#127.0.0.2:4001#backend:99999", err: `port "99999" is not a port`},
		{value: "a#127.0.0.2:1#x:1##b#127.0.0.2:1#y:1", err: "listen address 127.0.0.2:1 is used twice"},
		{value: "a#127.0.0.2:1", err: "got 2 fields"},
		{value: "a#127.0.0.2:15000#x:1", err: "port 15000 is the mesh proxy's own"},
	} {
		got, err := ParseEgress(tc.value)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error saying %q", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil || FormatEgress(got) != tc.value {
			t.Errorf("%q: %+v %v (formats as %q)", tc.value, got, err, FormatEgress(got))
		}
	}
}

func TestAnnotationNames(t *testing.T) {
	if _, present, err := FromAnnotations(map[string]string{"other": "x"}); present || err != nil {
		t.Errorf("no mesh annotation: %v %v", present, err)
	}
	// Present but empty: the sidecar with mTLS on every port.
	cfg, present, err := FromAnnotations(map[string]string{IngressAnnotation: ""})
	if !present || err != nil || cfg.Ingress.Disabled || len(cfg.Ingress.Ports) != 0 {
		t.Errorf("empty ingress: %+v %v %v", cfg, present, err)
	}
	if _, _, err := FromAnnotations(map[string]string{IngressAnnotation: "a#1#true", ContrastIngressAnnotation: "a#2#true"}); err == nil ||
		!strings.Contains(err.Error(), "both Cloister's and Contrast's name") {
		t.Errorf("both names, different values: %v", err)
	}
	if _, _, err := FromAnnotations(map[string]string{IngressAnnotation: "a#1#true", ContrastIngressAnnotation: "a#1#true"}); err != nil {
		t.Errorf("both names, same value: %v", err)
	}
	if _, _, err := FromAnnotations(map[string]string{IngressAnnotation: "api#1#true", EgressAnnotation: "api#127.0.0.2:1#x:1"}); err == nil ||
		!strings.Contains(err.Error(), "both an ingress and an egress") {
		t.Errorf("one name for both: %v", err)
	}
	if _, _, err := FromAnnotations(map[string]string{EgressAnnotation: "x"}); err == nil || !strings.HasPrefix(err.Error(), "annotation "+EgressAnnotation+": egress entry 1") {
		t.Errorf("a malformed egress names the annotation and the entry: %v", err)
	}
}

// Whatever a user writes: a clear error or a configuration that formats
// back to a value parsing to the same configuration.
func FuzzParseIngress(f *testing.F) {
	for _, s := range []string{"", "DISABLED", "main#8001#false##metrics#8080#true", "a#1#true##", "#", "##", "a#65535#false"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := ParseIngress(s)
		if err != nil {
			return
		}
		again, err := ParseIngress(cfg.String())
		if err != nil || !reflect.DeepEqual(again, cfg) {
			t.Fatalf("%q -> %+v -> %q -> %+v %v", s, cfg, cfg.String(), again, err)
		}
	})
}

func FuzzParseEgress(f *testing.F) {
	for _, s := range []string{"", "backend#127.0.0.2:4001#backend.default:4001", "a#127.0.0.1:1#[::1]:2", "a#127.0.0.1:1#x:1##", "###"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		es, err := ParseEgress(s)
		if err != nil {
			return
		}
		again, err := ParseEgress(FormatEgress(es))
		if err != nil || !reflect.DeepEqual(again, es) {
			t.Fatalf("%q -> %+v -> %q -> %+v %v", s, es, FormatEgress(es), again, err)
		}
	})
}
