package vault

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

const digest = "5f0b9cfa5c7e3e1b0e2fd4c1f1a8b3f4f58c2c6a9f1d0c3b2a4e5f6a7b8c9d0e"

func testVault(t *testing.T) *servicesv1beta1.Vault {
	t.Helper()
	k, err := policy.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return &servicesv1beta1.Vault{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "secrets"},
		Spec: servicesv1beta1.VaultSpec{
			CAS: servicesv1beta1.VaultCAS{Name: "cas"}, RuntimeClassName: "cloister-cc-sim-v1", Replicas: 3,
			Policy: servicesv1beta1.VaultPolicy{Owners: []string{string(policy.MarshalPublicKey(&k.PublicKey))}},
		},
	}
}

// The policy the owners sign: the pods' identity, their names, the
// seal's transit key and Vault's configuration, nothing the host picks.
func TestPolicy(t *testing.T) {
	v := testVault(t)
	doc, err := Policy(v, PolicyInput{Platform: runtimeclass.Sim, Digest: digest, CAS: "cas.shop.svc:8081"})
	if err != nil {
		t.Fatal(err)
	}
	// What CAS takes: it parses the canonical form as owners upload it.
	if _, err := policy.Parse(doc.Canonical()); err != nil {
		t.Fatalf("CAS would refuse the Vault's policy: %v", err)
	}
	if doc.Name != "shop/secrets" || !doc.AllowSimulation || len(doc.Owners.Keys) != 1 {
		t.Errorf("policy %s, simulation %v, owners %d", doc.Name, doc.AllowSimulation, len(doc.Owners.Keys))
	}
	svc, _ := ServiceName(v)
	s := doc.Service(svc)
	if s == nil {
		t.Fatalf("no service %s in %+v", svc, doc.Services)
	}
	if ids := s.Attestation.Identities; len(ids) != 1 || ids[0].Type != attest.Sim || ids[0].HostData.String() != digest {
		t.Errorf("identities %+v, want the pod policy's digest as sim host data", ids)
	}
	for _, san := range []string{"secrets.shop.svc", "secrets-0.secrets-internal.shop.svc", "secrets-2.secrets-internal.shop.svc"} {
		if !slices.Contains(s.Certificate.SANs, san) {
			t.Errorf("SANs %v lack %s", s.Certificate.SANs, san)
		}
	}
	if k := s.TransitKey(SealKey); k == nil || k.Version != 1 {
		t.Errorf("transit key %s: %+v", SealKey, s.Transit)
	}

	// Vault reads its configuration as HCL (v1, as Vault 1.14 does).
	var cfg struct {
		Listener map[string]map[string]string `hcl:"listener"`
		Storage  map[string]struct {
			Path string `hcl:"path"`
			// HCL v1 decodes a repeated block into one item per
			// attribute; Vault reads retry_join from its syntax tree.
			RetryJoin []map[string]string `hcl:"retry_join"`
		} `hcl:"storage"`
		Seal map[string]map[string]string `hcl:"seal"`
	}
	file := s.Files[ConfigFile]
	if err := hcl.Decode(&cfg, file); err != nil {
		t.Fatalf("Vault's configuration is not HCL: %v\n%s", err, file)
	}
	tcp := cfg.Listener["tcp"]
	if tcp["tls_cert_file"] != "/cloister/tls-config/certChain.pem" || tcp["tls_key_file"] != "/cloister/tls-config/key.pem" || tcp["address"] != "[::]:8200" {
		t.Errorf("listener %v", tcp)
	}
	raft := cfg.Storage["raft"]
	var joins []map[string]string
	for _, attr := range raft.RetryJoin {
		if _, ok := attr["leader_api_addr"]; ok {
			joins = append(joins, map[string]string{})
		}
		if len(joins) > 0 {
			for k, v := range attr {
				joins[len(joins)-1][k] = v
			}
		}
	}
	if raft.Path != DataDir || len(joins) != 3 || joins[1]["leader_api_addr"] != "https://secrets-1.secrets-internal.shop.svc:8200" ||
		joins[1]["leader_ca_cert_file"] != "/cloister/tls-config/root-ca.pem" {
		t.Errorf("raft %s, joins %v", raft.Path, joins)
	}
	seal := cfg.Seal["transit"]
	want := map[string]string{
		"address": "https://cas.shop.svc:8081", "mount_path": "transit/", "key_name": SealKey, "disable_renewal": "true",
		"tls_ca_cert": "/cloister/tls-config/root-ca.pem", "tls_client_cert": "/cloister/tls-config/certChain.pem",
		"tls_client_key": "/cloister/tls-config/key.pem", "tls_server_name": "{{ .CAS.ServerName }}",
	}
	for k, w := range want {
		if seal[k] != w {
			t.Errorf("seal %s = %q, want %q", k, seal[k], w)
		}
	}
	if _, ok := seal["token"]; ok {
		t.Error("the seal has a token: its only credential is the attested certificate")
	}
}

func TestPolicyRefusals(t *testing.T) {
	v := testVault(t)
	for name, c := range map[string]struct {
		in   PolicyInput
		want string
	}{
		"snp without values": {PolicyInput{Platform: runtimeclass.SNP, Digest: digest, CAS: "cas.shop.svc:8081"}, "reference values for snp"},
		"no pod policy":      {PolicyInput{Platform: runtimeclass.Sim, Digest: "", CAS: "cas.shop.svc:8081"}, "not a SHA-256"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Policy(v, c.in); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	v.Spec.Policy.Owners = []string{"not a key"}
	if _, err := Policy(v, PolicyInput{Platform: runtimeclass.Sim, Digest: digest, CAS: "cas.shop.svc:8081"}); err == nil {
		t.Error("a policy of an owner that is no key was made")
	}
}
