package vault

import (
	"fmt"
	"strconv"
	"strings"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/transit"
	"github.com/cloister-cc/cloister/internal/workload/generate"
	"github.com/cloister-cc/cloister/internal/workload/initenv"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// Names the Vault's policy and pods share, defined once.
const (
	// SealKey is the transit key CAS keeps for the Vault's seal.
	SealKey = "vault-seal"
	// ConfigFile is Vault's configuration among the policy's files: the
	// initializer writes it under files/ of its folder.
	ConfigFile = "/vault.hcl"
	// DataDir is where each replica's claim holds raft's data.
	DataDir = "/vault/data"
	// workloadKind is the Vault's pods' kind, which names their service
	// in the policy as generate names it.
	workloadKind = "StatefulSet"
)

// PolicyName is the Vault's policy's name in CAS: in the Vault's
// namespace, as a policy resource there may register only.
func PolicyName(v *servicesv1beta1.Vault) string {
	name := v.Spec.Policy.Name
	if name == "" {
		name = v.Name
	}
	return v.Namespace + "/" + name
}

// ServiceName is the Vault's pods' service in its policy.
func ServiceName(v *servicesv1beta1.Vault) (string, error) {
	return generate.ServiceName(v.Namespace, workloadKind, v.Name)
}

// internalName is the headless Service naming each replica.
func internalName(v *servicesv1beta1.Vault) string { return v.Name + "-internal" }

// ReplicaHost is replica i's DNS name, which its certificate names.
func ReplicaHost(v *servicesv1beta1.Vault, i int) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc", v.Name, i, internalName(v), v.Namespace)
}

func port(v *servicesv1beta1.Vault) int {
	if v.Spec.Service.Port == 0 {
		return servicesv1beta1.DefaultVaultPort
	}
	return int(v.Spec.Service.Port)
}

// PolicyInput is what the Vault's policy is made from besides its spec.
type PolicyInput struct {
	Platform runtimeclass.Platform
	// Reference values of a hardware platform; nil for sim.
	Reference *refvalues.File
	// Digest is the pod policy's (hex SHA-256 of its initdata), the
	// pods' identity.
	Digest string
	// CAS is the CAS's Service address, HOST:PORT.
	CAS string
}

// Policy is the CAS policy of a Vault's pods for its owners to sign: one
// service, identified by the pod policy under the platform's values,
// with a certificate for the Vault's Service and each replica, the seal's
// transit key, and Vault's whole configuration as a file.
func Policy(v *servicesv1beta1.Vault, in PolicyInput) (*policy.Document, error) {
	svc, err := ServiceName(v)
	if err != nil {
		return nil, err
	}
	m := generate.Manifest{Name: PolicyName(v), Platform: in.Platform, Reference: in.Reference, OwnerKeys: v.Spec.Policy.Owners}
	var addresses []string
	if ip := v.Spec.Service.LoadBalancerIP; ip != "" {
		addresses = append(addresses, ip)
	}
	labels := map[string]string{"app": v.Name}
	doc, err := m.Document(
		[]generate.Workload{{Kind: workloadKind, Namespace: v.Namespace, Name: v.Name, Service: svc, Digest: in.Digest, Labels: labels}},
		[]generate.Service{{Namespace: v.Namespace, Name: v.Name, Selector: labels, Addresses: addresses}})
	if err != nil {
		return nil, err
	}
	s := &doc.Services[0]
	replicas := int(max(v.Spec.Replicas, 1))
	for i := range replicas {
		s.Certificate.SANs = append(s.Certificate.SANs, ReplicaHost(v, i))
	}
	s.Transit = &policy.Transit{Keys: []policy.TransitKey{{Name: SealKey, Version: 1}}}
	s.Files[ConfigFile] = Config(v, in.CAS)
	if err := doc.Validate(); err != nil {
		return nil, fmt.Errorf("the Vault's policy: %w", err)
	}
	return doc, nil
}

// Config is Vault's configuration, as CAS gives it to the attested pods:
// TLS with the pod's certificate from CAS, raft joining every replica
// over TLS that chains to CAS's root, and the transit seal at CAS,
// authenticated by the pod's attested client certificate alone (no
// token). {{ .CAS.ServerName }} is CAS's template: the name CAS serves
// its workloads' TLS under, from its own CA.
func Config(v *servicesv1beta1.Vault, casAddress string) string {
	dir := initenv.DefaultOut + "/"
	p := port(v)
	var b strings.Builder
	b.WriteString("# Made by the Cloister operator for the Vault " + v.Namespace + "/" + v.Name + "; signed by its owners.\n")
	b.WriteString("ui = false\ndisable_mlock = true\n")
	b.WriteString("listener \"tcp\" {\n")
	b.WriteString("  address = \"[::]:" + strconv.Itoa(p) + "\"\n")
	b.WriteString("  cluster_address = \"[::]:" + strconv.Itoa(p+1) + "\"\n")
	b.WriteString("  tls_cert_file = " + strconv.Quote(dir+casclient.CertChainFile) + "\n")
	b.WriteString("  tls_key_file = " + strconv.Quote(dir+casclient.KeyFile) + "\n")
	b.WriteString("  tls_min_version = \"tls13\"\n")
	b.WriteString("}\n")
	b.WriteString("storage \"raft\" {\n  path = \"" + DataDir + "\"\n")
	for i := range int(max(v.Spec.Replicas, 1)) {
		b.WriteString("  retry_join {\n")
		b.WriteString("    leader_api_addr = \"https://" + ReplicaHost(v, i) + ":" + strconv.Itoa(p) + "\"\n")
		b.WriteString("    leader_ca_cert_file = " + strconv.Quote(dir+casclient.RootCAFile) + "\n")
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	b.WriteString("seal \"transit\" {\n")
	b.WriteString("  address = \"https://" + casAddress + "\"\n")
	b.WriteString("  mount_path = \"" + transit.Mount + "/\"\n")
	b.WriteString("  key_name = \"" + SealKey + "\"\n")
	b.WriteString("  disable_renewal = \"true\"\n")
	b.WriteString("  tls_ca_cert = " + strconv.Quote(dir+casclient.RootCAFile) + "\n")
	b.WriteString("  tls_client_cert = " + strconv.Quote(dir+casclient.CertChainFile) + "\n")
	b.WriteString("  tls_client_key = " + strconv.Quote(dir+casclient.KeyFile) + "\n")
	b.WriteString("  tls_server_name = \"{{ .CAS.ServerName }}\"\n")
	b.WriteString("}\n")
	return b.String()
}
