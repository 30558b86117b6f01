package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
)

// Through the CLI against a standalone CAS: its whole state put back as it
// was before an update is refused until the recovery owners accept its
// generation (cloister cas recover --accept-generation, the generation CAS
// names), and a CAS whose state is gone is initialised again only by its
// owners' signatures (cloister cas init --approve-key), never by a token.
func TestCASStateRollbackAndLoss(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
		stops = nil
	}
	start := func() []string {
		url, ca, stop := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none"})
		stops = append(stops, stop)
		return []string{"--cas", url, "--cas-ca", ca}
	}
	casArgs := start()
	var keys, initArgs []string
	for _, name := range []string{"r1", "r2"} {
		key, pub := keygen(t, dir, name+".pem")
		keys = append(keys, key)
		initArgs = append(initArgs, "--recovery-owner", writeFile(t, dir, name+".pub.pem", pub))
	}
	shares := filepath.Join(dir, "shares.json")
	mustRun(t, append(append([]string{"cas", "init", "--threshold", "2", "--out", shares, "--init-token-file", filepath.Join(state, cas.InitTokenFile)}, casArgs...), initArgs...)...)
	owner, ownerPub := keygen(t, dir, "owner.pem")
	doc := "version: cloister.dev/policy/v1\nname: shop\nowners:\n  keys:\n  - |\n" + indent(ownerPub) + "\nservices: []\n"
	register := func(text, after string) {
		t.Helper()
		src := writeFile(t, dir, "policy.yaml", text)
		link := []string{"--version", "1"}
		if after != "" {
			link = []string{"--after", after}
		}
		signed := writeFile(t, dir, "signed.yaml", mustRun(t, append([]string{"policy", "sign", "--key", owner, src}, link...)...))
		if after == "" {
			for _, k := range keys {
				signed = writeFile(t, dir, "signed.yaml", mustRun(t, "policy", "sign", "--key", k, signed))
			}
		}
		mustRun(t, append([]string{"cas", "register", signed}, casArgs...)...)
	}
	register(doc, "")
	stopAll()
	old := readFile(t, filepath.Join(state, "cas.db"))
	casArgs = start()
	recover := func(key string, extra ...string) (string, error) {
		out, _, err := run(t, append(append([]string{"cas", "recover", "--shares", shares, "--key", key}, casArgs...), extra...)...)
		return out, err
	}
	for _, k := range keys {
		if _, err := recover(k); err != nil {
			t.Fatal(err)
		}
	}
	register(strings.Replace(doc, "services: []", "services: []\nread: any", 1), filepath.Join(dir, "signed.yaml"))
	stopAll()
	writeFile(t, state, "cas.db", old)
	casArgs = start()
	if _, err := recover(keys[0]); err != nil {
		t.Fatal(err)
	}
	_, err := recover(keys[1])
	m := regexp.MustCompile(`--accept-generation (\d+)`).FindStringSubmatch(fmt.Sprint(err))
	if m == nil || !strings.Contains(err.Error(), "older than generation") {
		t.Fatalf("the shares on an older state: %v", err)
	}
	if _, err := recover(keys[0], "--accept-generation", m[1]); err == nil {
		t.Fatal("one owner's acceptance of two unlocked CAS")
	}
	if out, err := recover(keys[1], "--accept-generation", m[1]); err != nil || !strings.Contains(out, "CAS is ready") {
		t.Fatalf("the second owner's acceptance: %s %v", out, err)
	}

	// The state gone: no token is made, the one used is refused, and the
	// owners' signatures initialise a new CAS.
	stopAll()
	if err := os.Remove(filepath.Join(state, "cas.db")); err != nil {
		t.Fatal(err)
	}
	casArgs = start()
	if _, err := os.Stat(filepath.Join(state, cas.InitTokenFile)); !os.IsNotExist(err) {
		t.Errorf("a CAS that lost its state made an init token: %v", err)
	}
	token := writeFile(t, dir, "token", "any-token\n")
	newKey, newPub := keygen(t, dir, "new.pem")
	newInit := append([]string{"cas", "init", "--out", filepath.Join(dir, "new-shares.json"), "--recovery-owner", writeFile(t, dir, "new.pub.pem", newPub)}, casArgs...)
	if _, _, err := run(t, append(newInit, "--init-token-file", token)...); err == nil || !strings.Contains(err.Error(), "an init token never initialises it again") {
		t.Errorf("an init by a token after the loss: %v", err)
	}
	if _, _, err := run(t, append(newInit, "--approve-key", keys[0])...); err == nil || !strings.Contains(err.Error(), "1 of the recovery owners signed this init, 2 needed") {
		t.Errorf("one owner's approval of two: %v", err)
	}
	if _, _, err := run(t, append(newInit, "--approve-key", keys[0], "--approve-key", newKey)...); err == nil || !strings.Contains(err.Error(), "is not a recovery owner") {
		t.Errorf("a stranger's approval: %v", err)
	}
	if out := mustRun(t, append(newInit, "--approve-key", keys[0], "--approve-key", keys[1])...); !strings.Contains(out, "CAS initialised") {
		t.Errorf("the owners' approvals: %s", out)
	}
}
