package core

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/seal"
	"github.com/cloister-cc/cloister/internal/cas/secret"
	"github.com/cloister-cc/cloister/internal/cas/seed"
)

// workloadSecretPolicy has three services: api and worker name the
// workload secret id db, batch names jobs; each gets its workload secret
// in a file.
func (f *fixture) workloadSecretPolicy(name, apiID string) string {
	return strings.NewReplacer(
		"name: shop", "name: "+name,
		"  secrets: [dbKey, tls]\n", "  secrets: [dbKey, tls]\n  workloadSecretID: "+apiID+"\n",
		"  certificate: {sans: [worker.shop.svc]}\n", "  certificate: {sans: [worker.shop.svc]}\n  workloadSecretID: db\n  files: {/secret: \"{{ .WorkloadSecret.Hex }}\"}\n",
		"  files: {/run/tls/key.pem: \"{{ .Secrets.tls.Key }}\"}\n", "  files: {/run/tls/key.pem: \"{{ .Secrets.tls.Key }}\", /secret: \"{{ .WorkloadSecret.Hex }}\"}\n",
		"secrets:\n- {name: dbKey", `- name: batch
  attestation: {identities: []}
  certificate: {sans: [batch.shop.svc]}
  workloadSecretID: jobs
  env: {KEY: "{{ .WorkloadSecret.Base64 }}"}
  files: {/secret: "{{ .WorkloadSecret.Hex }}"}
secrets:
- {name: dbKey`,
	).Replace(f.policyText(""))
}

// workloadSecret attests a new replica of the service of the policy and
// returns the workload secret its file holds.
func (f *fixture) workloadSecret(policyName, service string) string {
	f.t.Helper()
	req := f.request(service, nil)
	req.Policy = policyName
	res, err := f.attest(req)
	if err != nil {
		f.t.Fatalf("attest %s/%s: %v", policyName, service, err)
	}
	s := res.Files["/secret"]
	if b, err := hex.DecodeString(s); err != nil || len(b) != secret.WorkloadSecretSize {
		f.t.Fatalf("%s/%s's workload secret file: %q", policyName, service, s)
	}
	return s
}

func TestWorkloadSecretByID(t *testing.T) {
	f := newFixture(t, seal.NoSealer{}, 1, 1)
	if _, err := f.register(f.workloadSecretPolicy("shop", "db"), f.owner); err != nil {
		t.Fatal(err)
	}
	api := f.workloadSecret("shop", "api")
	if again := f.workloadSecret("shop", "api"); again != api {
		t.Error("two replicas of a service got different workload secrets")
	}
	if worker := f.workloadSecret("shop", "worker"); worker != api {
		t.Error("two services of a policy that name the same id got different workload secrets")
	}
	batch := f.workloadSecret("shop", "batch")
	if batch == api {
		t.Error("another id gave the same workload secret")
	}
	req := f.request("batch", nil)
	res, err := f.attest(req)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := hex.DecodeString(batch); res.Env["KEY"] != base64.StdEncoding.EncodeToString(b) {
		t.Errorf("batch's env KEY %q is not its workload secret in base64", res.Env["KEY"])
	}

	// Another policy naming the same ids gets other secrets: the id is the
	// policy's own, not a handle on another tenant's secret.
	mall := strings.NewReplacer("api.shop.svc, 10.1.2.3", "api.mall.svc", "worker.shop.svc", "worker.mall.svc", "batch.shop.svc", "batch.mall.svc").
		Replace(f.workloadSecretPolicy("mall", "db"))
	if _, err := f.register(mall, f.owner); err != nil {
		t.Fatal(err)
	}
	if f.workloadSecret("mall", "api") == api || f.workloadSecret("mall", "batch") == batch {
		t.Error("another policy's services got this policy's workload secrets by naming its ids")
	}

	// A new version that keeps the id keeps the secret; one that changes
	// it rotates the secret; going back to the id gives the old one again.
	kept := strings.Replace(f.workloadSecretPolicy("shop", "db"), "validity: 2h", "validity: 3h", 1)
	if r, err := f.register(kept, f.owner); err != nil || r.Version != 2 {
		t.Fatalf("version 2: %+v %v", r, err)
	}
	if f.workloadSecret("shop", "api") != api {
		t.Error("a new version that kept the id changed the workload secret")
	}
	if _, err := f.register(f.workloadSecretPolicy("shop", "db-v2"), f.owner); err != nil {
		t.Fatal(err)
	}
	rotated := f.workloadSecret("shop", "api")
	if rotated == api {
		t.Error("a new id kept the workload secret")
	}
	if f.workloadSecret("shop", "worker") != api {
		t.Error("the worker's id did not change, yet its secret did")
	}
	if _, err := f.register(kept, f.owner); err != nil {
		t.Fatal(err)
	}
	if f.workloadSecret("shop", "api") != api {
		t.Error("going back to the old id did not give the old workload secret")
	}

	// Nothing stores it: the recovery owners' seed derives it, so it
	// survives a recovery, and they can derive it (docs/security.md).
	sh, err := seed.OpenShare(f.shares.Shares[0].Sealed, f.rec[0])
	if err != nil {
		t.Fatal(err)
	}
	s, err := seed.FromBytes(sh.Value) // one owner of one: the share is the seed
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(secret.Workload(s, "shop", "db").Raw); got != api {
		t.Error("the workload secret is not the one the seed derives for (shop, db)")
	}
}
