package generate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/attest/podpolicy"
)

// configs knows the configuration of nginx's image only.
type configs map[string]*podpolicy.ImageConfig

func (c configs) Config(_ context.Context, image string) (*podpolicy.ImageConfig, error) {
	if cfg, ok := c[image]; ok {
		return cfg, nil
	}
	return nil, errors.New("its configuration is not in the cache")
}

// policyOf reads the policy, and the agent policy beside it, of the pod
// template in document i of a generated stream.
func policyOf(t *testing.T, out string, i int) *podpolicy.Policy {
	t.Helper()
	var d struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			} `json:"template"`
		} `json:"spec"`
	}
	doc(t, out, i, &d)
	// FromAnnotation refuses an initdata whose policy.rego is not its
	// policy's own.
	p, _, err := podpolicy.FromAnnotation(d.Spec.Template.Metadata.Annotations[podpolicy.Annotation])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTheAgentPolicyPinsWhatTheImageRuns(t *testing.T) {
	opts := options()
	opts.Configs = configs{"nginx@" + sha('a'): {Entrypoint: []string{"/docker-entrypoint.sh"}, Cmd: []string{"nginx", "-g", "daemon off;"}, User: "101"}}
	out, res := rewrite(t, threeTier, opts)
	p := policyOf(t, out, 0)
	web := p.Containers[0]
	if web.ImageConfig == nil || web.ImageConfig.Entrypoint[0] != "/docker-entrypoint.sh" {
		t.Fatalf("web's image configuration %+v", web.ImageConfig)
	}
	rego := string(p.Rego())
	for _, want := range []string{`"^/docker-entrypoint\\.sh$"`, `"^daemon off;$"`, `"uid": 101`} {
		if !strings.Contains(rego, want) {
			t.Errorf("the agent policy lacks %s", want)
		}
	}
	// The images whose configuration is unknown are named.
	var warned []string
	for _, w := range res.Workloads {
		for _, msg := range w.Warnings {
			if strings.Contains(msg, "does not pin") {
				warned = append(warned, msg)
			}
		}
	}
	if len(warned) == 0 || strings.Contains(strings.Join(warned, "\n"), "container web:") {
		t.Errorf("warnings %q", warned)
	}

	// The same input, the same bytes; another configuration, another digest.
	again, res2 := rewrite(t, threeTier, opts)
	if again != out || res2.Workloads[0].Digest != res.Workloads[0].Digest {
		t.Error("a second run with the same configuration changed the output")
	}
	opts.Configs.(configs)["nginx@"+sha('a')].User = "0"
	if _, res3 := rewrite(t, threeTier, opts); res3.Workloads[0].Digest == res.Workloads[0].Digest {
		t.Error("another user in the image's configuration kept the digest")
	}
}

// A pod whose policy would not fit the API server's annotation limit is
// refused with the size.
func TestTooLargeAPolicyIsRefused(t *testing.T) {
	var env strings.Builder
	for i := range 4000 {
		// Hashes, so that gzip cannot make them small.
		fmt.Fprintf(&env, "        - name: V%d\n          value: %x\n", i, sha256.Sum256([]byte(fmt.Sprint(i))))
	}
	big := strings.Replace(threeTier, "        ports:\n        - containerPort: 8080\n", "        env:\n"+env.String(), 1)
	_, _, err := Rewrite(context.Background(), []byte(big), options())
	if err == nil || !strings.Contains(err.Error(), "more than the 262144 the API server takes") {
		t.Fatalf("error %v", err)
	}
}
