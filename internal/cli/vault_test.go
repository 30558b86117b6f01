package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

// An owner opens their own recovery key of a Vault's bundle, and only
// with their key.
func TestVaultRecoveryKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "owner.pem")
	owner, err := policy.CreateKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(dir, "other.pem")
	if _, err := policy.CreateKeyFile(otherFile); err != nil {
		t.Fatal(err)
	}
	b, err := vaultinit.SealRecovery("shop/secrets", [][]byte{[]byte("cmVjb3Zlcnk=")}, []string{string(policy.MarshalPublicKey(&owner.PublicKey))}, 1)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(b)
	bundle := filepath.Join(dir, "recovery.json")
	if err := os.WriteFile(bundle, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "vault", "recovery-key", "--key", keyFile, "--bundle", bundle)
	if err != nil || out != "cmVjb3Zlcnk=\n" {
		t.Fatalf("the owner's recovery key: %q %v", out, err)
	}
	if _, _, err := run(t, "vault", "recovery-key", "--key", otherFile, "--bundle", bundle); err == nil || !strings.Contains(err.Error(), "no recovery key of owner") {
		t.Errorf("another key: %v", err)
	}
	if _, _, err := run(t, "vault", "recovery-key", "--key", keyFile); err == nil || !strings.Contains(err.Error(), "--bundle") {
		t.Errorf("no bundle: %v", err)
	}
}
