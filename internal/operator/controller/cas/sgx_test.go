package cas

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/gramine"
)

// A CAS in SGX runs Gramine's loader on the image's signed manifest for
// its sealing, with no command line of its own (the manifest's is
// measured), only the host-chosen variables the manifest passes through,
// an SGX enclave and the enclave's EPC, the node's AESM, its volume where
// the manifest mounts it; clients trust it by spec.sgx.mrenclave alone.
func TestCASInSGX(t *testing.T) {
	mr := strings.Repeat("5a", 32)
	for sealing, manifest := range map[servicesv1beta1.CASEnclaveSealing]string{
		"": gramine.SealToMRENCLAVE.Manifest, servicesv1beta1.CASSealToMRENCLAVE: gramine.SealToMRENCLAVE.Manifest, servicesv1beta1.CASSealToMRSIGNER: gramine.SealToMRSIGNER.Manifest,
	} {
		cr := casCR(func(c *servicesv1beta1.CAS) {
			c.Spec.SGX = &servicesv1beta1.CASSGX{MREnclave: mr, Sealing: sealing}
			c.Spec.Persistence.Enabled = true
			c.Spec.Collateral = &servicesv1beta1.CASCollateral{PCS: "https://pcs.example"}
		})
		_, ss := render(t, cr)
		pod := ss.Spec.Template.Spec
		c := pod.Containers[0]
		if !slices.Equal(c.Command, []string{"gramine-sgx", manifest}) || c.WorkingDir != gramine.Dir || len(c.Args) != 0 || pod.RuntimeClassName != nil {
			t.Errorf("sealing %q: command %v in %s, args %v, runtime class %v", sealing, c.Command, c.WorkingDir, c.Args, pod.RuntimeClassName)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
			if !slices.ContainsFunc(cas.HostChosen, func(f string) bool { return cas.HostEnv(f) == e.Name }) {
				t.Errorf("sealing %q: the pod sets %s, which the manifest does not pass through", sealing, e.Name)
			}
		}
		if env[cas.HostEnv("store")].Value != "kubernetes:team/cas" || env[cas.HostEnv("peers")].Value != "cas" || env[cas.HostEnv("pcs")].Value != "https://pcs.example" ||
			!strings.Contains(env[cas.HostEnv("tls-san")].Value, "cas.team.svc") {
			t.Errorf("sealing %q: env %+v", sealing, c.Env)
		}
		if node := env[cas.HostEnv("node")].ValueFrom; node == nil || node.FieldRef == nil || node.FieldRef.FieldPath != "spec.nodeName" {
			t.Errorf("sealing %q: the node is not the pod's: %+v", sealing, node)
		}
		if c.Resources.Limits.Name(tee.SGXEnclave, resource.DecimalSI).Value() != 1 || c.Resources.Limits.Name(tee.SGXEPC, resource.BinarySI).Value() != gramine.EnclaveSize {
			t.Errorf("sealing %q: limits %v, want an enclave and %d bytes of EPC", sealing, c.Resources.Limits, gramine.EnclaveSize)
		}
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		if mounts["db"] != gramine.StateDir || mounts["aesmd"] != "/var/run/aesmd" || mounts["init-token"] != "/run/cloister/init-token" {
			t.Errorf("sealing %q: mounts %v", sealing, mounts)
		}
		if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.Privileged != nil || len(sc.Capabilities.Drop) != 1 {
			t.Errorf("sealing %q: security %+v", sealing, sc)
		}
		for _, v := range pod.Volumes {
			if v.Name == "aesmd" && (v.HostPath == nil || v.HostPath.Path != "/var/run/aesmd") {
				t.Errorf("sealing %q: AESM from %+v", sealing, v.VolumeSource)
			}
		}
		e := conn.Expect(cr)
		if id := e.Policy.Identities; e.Policy.AllowSimulation || len(id) != 1 || id[0].Type != attest.SGX || id[0].MRENCLAVE.String() != mr || len(id[0].MRSIGNER) != 0 {
			t.Errorf("sealing %q: clients expect %+v", sealing, e.Policy)
		}
	}
	// A mrenclave the CRD would refuse pins no enclave at all.
	bad := casCR(func(c *servicesv1beta1.CAS) { c.Spec.SGX = &servicesv1beta1.CASSGX{MREnclave: "zz"} })
	if id := conn.Expect(bad).Policy.Identities; len(id) != 1 || len(id[0].MRENCLAVE) == 0 {
		t.Errorf("a bad mrenclave: %+v", id)
	}
}
