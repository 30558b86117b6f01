package client

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// The env file, sourced by a shell as a workload's entrypoint does, gives
// back exactly the values CAS sent: a newline, quote, $ or backquote in a
// value cannot add a variable or run a command.
func TestEnvFileEscapes(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh to source the env file with: %v", err)
	}
	env := map[string]string{
		"PLAIN":  "4141fc9a80227aa1",
		"URL":    "https://db.shop.svc:5432/x?a=b",
		"NL":     "one\nEVIL=injected",
		"QUOTE":  "it's \"quoted\"",
		"SUBST":  "$(touch pwned) `touch pwned2` ${HOME}",
		"EMPTY":  "",
		"SPACES": "  a b  ",
	}
	dir := t.TempDir()
	if err := write(dir, &wire.AttestResult{Content: wire.Content{Env: env}}, nil); err != nil {
		t.Fatal(err)
	}
	for k, v := range env {
		script := "set -a; . ./" + EnvFile + "; printf '%s' \"$" + k + "\""
		cmd := exec.Command(sh, "-c", script)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != v {
			t.Errorf("%s: sourced as %q (%v), want %q", k, out, err, v)
		}
	}
	cmd := exec.Command(sh, "-c", "set -a; . ./"+EnvFile+"; printf '%s' \"${EVIL-unset}\"")
	cmd.Dir = dir
	if out, _ := cmd.CombinedOutput(); string(out) != "unset" {
		t.Errorf("a newline in a value set EVIL=%q", out)
	}
	for _, f := range []string{"pwned", "pwned2"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("sourcing the env file ran a command (%s exists)", f)
		}
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, EnvFile)); !strings.Contains(string(raw), "PLAIN=4141fc9a80227aa1\n") {
		t.Errorf("a plain value is quoted: %s", raw)
	}
	if err := write(t.TempDir(), &wire.AttestResult{Content: wire.Content{Env: map[string]string{"A;B": "x"}}}, nil); err == nil || !strings.Contains(err.Error(), `bad name "A;B"`) {
		t.Errorf("a bad variable name: %v", err)
	}
}

// A workload refuses a certificate CAS made for another key than its own.
func TestCertifiesOnlyTheWorkloadsKey(t *testing.T) {
	mine, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &mine.PublicKey, other)
	if err != nil {
		t.Fatal(err)
	}
	chain := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if err := certifies(chain, &mine.PublicKey); err != nil {
		t.Errorf("the workload's own certificate: %v", err)
	}
	if err := certifies(chain, &other.PublicKey); err == nil || !strings.Contains(err.Error(), "another key") {
		t.Errorf("a certificate for another key: %v", err)
	}
	if err := certifies("", &mine.PublicKey); err == nil {
		t.Error("an answer without a certificate was taken")
	}
}
