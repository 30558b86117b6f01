package generate

import (
	"bytes"
	"encoding/json"
	"fmt"

	laswire "github.com/cloister-cc/cloister/internal/las/wire"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
)

// InitializerPath is where the initializer image keeps its binary (the
// images' /usr/local/bin), and where an SGX image copies it: the
// enclave's entrypoint. The real-node e2e runs it from there.
const InitializerPath = "/usr/local/bin/" + InitializerName

// GramineFile names the Gramine manifest lines of an SGX workload in the
// workspace.
func GramineFile(service string) string { return "gramine." + service + ".toml" }

// GramineManifest is what an SGX workload's Gramine manifest must say
// for the initializer to be its premain: the initializer as entrypoint,
// DCAP attestation, the enclave's size, and the initializer's settings.
// Whom the enclave trusts (CAS's expectation, the manifest's name, owners
// and service) is written into the manifest, so MRENCLAVE measures it
// and a host cannot change it; only where CAS and the node's LAS are
// comes from the pod, and CAS proves itself against the expectation.
func GramineManifest(w Workload, opts Options) ([]byte, error) {
	if w.Enclave == nil {
		return nil, fmt.Errorf("%s %s/%s is no SGX workload", w.Kind, w.Namespace, w.Name)
	}
	var b bytes.Buffer
	line := func(format string, args ...any) { _, _ = fmt.Fprintf(&b, format+"\n", args...) }
	var err error
	str := func(s string) string {
		// A JSON string is a TOML basic string: both escape ", \ and
		// control characters alike.
		var q bytes.Buffer
		enc := json.NewEncoder(&q)
		enc.SetEscapeHTML(false)
		if e := enc.Encode(s); e != nil && err == nil {
			err = e
		}
		return string(bytes.TrimSuffix(q.Bytes(), []byte("\n")))
	}
	line("# Cloister's premain for %s %s/%s (CAS service %s).", w.Kind, w.Namespace, w.Name, w.Service)
	line("# Add these lines to the enclave's Gramine manifest, copy the initializer into the")
	line("# image (COPY --from=%s %s %s),", opts.InitializerImage, InitializerPath, InitializerPath)
	line("# put the application and its arguments after \"--\" in loader.argv, build and sign the")
	line("# enclave, then pin it in the CAS manifest:")
	line("#   cloister reference-values compute --platform sgx --sigstruct APP.sig > %s.sgx.yaml", w.Name)
	line("#   cloister generate --reference-values %s.sgx.yaml ...", w.Name)
	line("# The initializer attests to CAS from inside the enclave, writes the service's")
	line("# certificate, files and secrets to %s (enclave memory: add the fs.mounts entry)", initenv.SecretsPath)
	line("# and becomes the application in the same enclave.")
	line("libos.entrypoint = %s", str(InitializerPath))
	line("loader.argv = [%s, \"--exec\", \"--\", \"APPLICATION\"]", str(InitializerPath))
	line("sgx.remote_attestation = \"dcap\"")
	line("sgx.debug = false")
	line("sgx.enclave_size = %s", str(gramineSize(w.Enclave.Size)))
	line("# Add to sgx.trusted_files: \"file:%s\"", InitializerPath)
	line("# Add to fs.mounts: { type = \"tmpfs\", path = %s }", str(initenv.SecretsPath))
	line("")
	line("# Measured: whom the enclave trusts.")
	line("loader.env.%s = %s", initenv.EnvEvidence, str(initenv.EvidenceSGX))
	line("loader.env.%s = %s", initenv.EnvExpect, str(opts.CASExpect))
	line("loader.env.%s = %s", initenv.EnvPolicy, str(opts.Policy))
	line("loader.env.%s = %s", initenv.EnvService, str(w.Service))
	line("loader.env.%s = %s", initenv.EnvPolicyOwners, str(opts.PolicyOwners))
	if opts.PolicyOwnerThreshold != "" {
		line("loader.env.%s = %s", initenv.EnvPolicyOwnerThreshold, str(opts.PolicyOwnerThreshold))
	}
	if opts.WitnessPolicy != "" {
		line("loader.env.%s = %s", initenv.EnvWitnessPolicy, str(opts.WitnessPolicy))
		if opts.WitnessMaxAge != "" {
			line("loader.env.%s = %s", initenv.EnvWitnessMaxAge, str(opts.WitnessMaxAge))
		}
	}
	if opts.TestRoots != "" {
		line("# INSECURE, tests only: test roots CAS's evidence may chain to.")
		line("loader.env.%s = %s", initenv.EnvInsecureTestRoots, str(opts.TestRoots))
	}
	line("# From the pod: where CAS and the node's LAS are.")
	for _, name := range []string{initenv.EnvCAS, laswire.EnvNodeIP, laswire.EnvAddr} {
		line("loader.env.%s = { passthrough = true }", name)
	}
	return b.Bytes(), err
}

// gramineSize writes a size as Gramine's manifests do.
func gramineSize(n int64) string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"G", 30}, {"M", 20}, {"K", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
	}
	return fmt.Sprint(n)
}
