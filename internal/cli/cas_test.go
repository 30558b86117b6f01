package cli

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The whole CAS workflow through the CLI against a real cloister-cas on
// loopback: init, sign and register a policy, attest with sim evidence,
// restart into recovery mode, recover with k of n shares.
func TestCASWorkflow(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	// The developer's simulation key, named to CAS explicitly.
	simKey, simPub := keygen(t, dir, "sim.pem")
	simPubFile := writeFile(t, dir, "sim.pub.pem", simPub)
	url, ca, stop := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none", Simulation: true, SimKeys: simPubFile})
	casArgs := []string{"--cas", url, "--cas-ca", ca}
	var owners, initArgs []string
	for _, name := range []string{"r1", "r2", "r3"} {
		key, pub := keygen(t, dir, name+".pem")
		owners = append(owners, key)
		pubFile := filepath.Join(dir, name+".pub.pem")
		if err := os.WriteFile(pubFile, []byte(pub), 0o644); err != nil {
			t.Fatal(err)
		}
		initArgs = append(initArgs, "--recovery-owner", pubFile)
	}
	shares := filepath.Join(dir, "shares.json")
	// Whoever reaches CAS first does not become its owner: init needs the
	// token CAS wrote into its state folder, and takes it once.
	tokenFile := filepath.Join(state, cas.InitTokenFile)
	wrong := writeFile(t, dir, "wrong-token", "not-the-token\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--init-token-file is required"},
		{[]string{"--init-token-file", wrong}, "not this CAS's init token (403, unauthorized)"},
	} {
		if _, _, err := run(t, append(append(append([]string{"cas", "init", "--out", shares}, casArgs...), initArgs...), tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("init with %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if info, err := os.Stat(tokenFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the init token file: %v %v", info, err)
	}
	keep := writeFile(t, dir, "token-copy", readFile(t, tokenFile))
	initArgs = append(initArgs, "--init-token-file", tokenFile)
	out := mustRun(t, append(append([]string{"cas", "init", "--threshold", "2", "--out", shares}, casArgs...), initArgs...)...)
	if !strings.Contains(out, "3 shares, any 2 recover it") {
		t.Errorf("init: %s", out)
	}
	if _, err := os.Stat(tokenFile); !os.IsNotExist(err) {
		t.Errorf("the init token is still there after init: %v", err)
	}
	if _, _, err := run(t, append(append([]string{"cas", "init", "--threshold", "2", "--out", shares + "2"}, casArgs...), append(initArgs[:len(initArgs)-2:len(initArgs)-2], "--init-token-file", keep)...)...); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("second init with the used token: %v", err)
	}

	owner, ownerPub := keygen(t, dir, "owner.pem")
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(`version: cloister.dev/policy/v1
name: shop
owners:
  keys:
  - |
`+indent(ownerPub)+`
allowSimulation: true
services:
- name: web
  attestation: {identities: []}
  certificate: {sans: [web.shop.svc]}
  env: {TOKEN: "{{ .Secrets.token.Hex }}"}
  files: {/etc/web/tls.pem: "{{ .Secrets.tls.Cert }}"}
  secrets: [token, tls]
secrets:
- {name: token, kind: symmetric-key, size: 16}
- {name: tls, kind: ecdsa-cert}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	signed := filepath.Join(dir, "signed.yaml")
	if err := os.WriteFile(signed, []byte(mustRun(t, append([]string{"policy", "sign", "--key", owner, policyFile}, casArgs...)...)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A new name: its owner alone does not make it; a majority of the
	// board (the recovery owners, by default) signs it too.
	if _, _, err := run(t, append([]string{"cas", "register", signed}, casArgs...)...); err == nil || !strings.Contains(err.Error(), "is a new name") {
		t.Errorf("a new name without the board: %v", err)
	}
	if err := os.WriteFile(signed, []byte(mustRun(t, "policy", "sign", "--key", owners[0], "--name", "shop-v1", signed)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A SignedPolicy signed again keeps its name: it is the same resource.
	if _, _, err := run(t, append([]string{"cas", "register", signed}, casArgs...)...); err == nil || !strings.Contains(err.Error(), "needs the signatures of 2 of the 3 board keys") {
		t.Errorf("a new name one of three board members approved: %v", err)
	}
	approved := mustRun(t, "policy", "sign", "--key", owners[1], signed)
	if !strings.Contains(approved, "\n  name: shop-v1\n") {
		t.Errorf("the SignedPolicy signed again lost its name:\n%s", approved)
	}
	writeFile(t, dir, "signed.yaml", approved)
	if out := mustRun(t, append([]string{"cas", "register", signed}, casArgs...)...); !strings.Contains(out, "policy shop registered: version 1") {
		t.Errorf("register: %s", out)
	}
	if out := mustRun(t, append([]string{"cas", "register", signed}, casArgs...)...); !strings.Contains(out, "unchanged") {
		t.Errorf("register again: %s", out)
	}
	// Version 2, signed where CAS says it goes; version 1 cannot come
	// back by submitting its SignedPolicy again.
	v2src := filepath.Join(dir, "policy-v2.yaml")
	if err := os.WriteFile(v2src, []byte(strings.Replace(readFile(t, policyFile), "secrets:\n-", "- {name: batch, attestation: {identities: []}, certificate: {sans: [batch.shop.svc]}}\nsecrets:\n-", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	v2 := filepath.Join(dir, "signed-v2.yaml")
	if err := os.WriteFile(v2, []byte(mustRun(t, append([]string{"policy", "sign", "--key", owner, "--after", signed, v2src}, casArgs...)...)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, append([]string{"cas", "register", v2}, casArgs...)...); !strings.Contains(out, "policy shop registered: version 2") {
		t.Errorf("register v2: %s", out)
	}
	if _, _, err := run(t, append([]string{"cas", "register", signed}, casArgs...)...); err == nil || !strings.Contains(err.Error(), "version 1 was replaced by version 2") {
		t.Errorf("version 1 again: %v", err)
	}

	// The same policy under another name, sealed to this CAS with the key
	// it publishes.
	sealedSrc := filepath.Join(dir, "sealed-policy.yaml")
	if err := os.WriteFile(sealedSrc, []byte(strings.NewReplacer("name: shop", "name: shop-sealed", "web.shop.svc", "web.shop-sealed.svc").Replace(readFile(t, policyFile))), 0o644); err != nil {
		t.Fatal(err)
	}
	sealed := filepath.Join(dir, "encrypted.yaml")
	sealedSigned := writeFile(t, dir, "sealed-signed.yaml", mustRun(t, "policy", "sign", "--key", owner, "--version", "1", sealedSrc))
	sealedSigned = writeFile(t, dir, "sealed-signed.yaml", mustRun(t, "policy", "sign", "--key", owners[1], sealedSigned))
	if err := os.WriteFile(sealed, []byte(mustRun(t, append([]string{"policy", "encrypt", "--key", owners[0], sealedSigned}, casArgs...)...)), 0o644); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(readFile(t, sealed), "web.shop-sealed.svc") {
		t.Error("the EncryptedPolicy shows the policy")
	}
	if out := mustRun(t, append([]string{"cas", "register", sealed}, casArgs...)...); !strings.Contains(out, "policy shop-sealed registered: version 1") {
		t.Errorf("register encrypted: %s", out)
	}

	attest := func(into string) (string, error) {
		out, _, err := run(t, append([]string{"cas", "attest", "--policy", "shop", "--service", "web", "--sim", "--sim-key", simKey, "--out", into}, casArgs...)...)
		return out, err
	}
	// A quote signed by any other key is refused by name.
	if _, _, err := run(t, append([]string{"cas", "attest", "--policy", "shop", "--service", "web", "--sim", "--out", filepath.Join(dir, "forged")}, casArgs...)...); err == nil || !strings.Contains(err.Error(), "which is not pinned: a forged quote") {
		t.Errorf("a simulated quote by an unpinned key: %v", err)
	}
	first := filepath.Join(dir, "first")
	if out, err := attest(first); err != nil || !strings.Contains(out, `certificate "CN=web.shop,O=Cloister CAS"`) {
		t.Fatalf("attest: %v\n%s", err, out)
	}
	chain := readFile(t, filepath.Join(first, "certChain.pem"))
	block, _ := pem.Decode([]byte(chain))
	leaf, _ := x509.ParseCertificate(block.Bytes)
	mesh := x509.NewCertPool()
	mesh.AppendCertsFromPEM([]byte(readFile(t, filepath.Join(first, "mesh-ca.pem"))))
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: mesh, DNSName: "web.shop.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate: %v", err)
	}
	if env := readFile(t, filepath.Join(first, "env")); !strings.HasPrefix(env, "TOKEN=") || len(env) != len("TOKEN=")+32+1 {
		t.Errorf("env %q", env)
	}
	if f := readFile(t, filepath.Join(first, "files/etc/web/tls.pem")); !strings.Contains(f, "BEGIN CERTIFICATE") {
		t.Errorf("file %q", f)
	}
	if info, _ := os.Stat(filepath.Join(first, "key.pem")); info.Mode().Perm() != 0o600 {
		t.Errorf("key.pem mode %v", info.Mode().Perm())
	}

	// Restart without a sealer: recovery mode until 2 of 3 owners.
	stop()
	url, ca, _ = castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none", Simulation: true, SimKeys: simPubFile})
	casArgs = []string{"--cas", url, "--cas-ca", ca}
	if _, err := attest(filepath.Join(dir, "locked")); err == nil || !strings.Contains(err.Error(), "recovery") {
		t.Errorf("attest in recovery mode: %v", err)
	}
	if out := mustRun(t, append([]string{"cas", "recover", "--shares", shares, "--key", owners[2]}, casArgs...)...); !strings.Contains(out, "1 more needed") {
		t.Errorf("first share: %s", out)
	}
	if _, err := attest(filepath.Join(dir, "still-locked")); err == nil {
		t.Error("k-1 shares unlocked CAS")
	}
	if out := mustRun(t, append([]string{"cas", "recover", "--shares", shares, "--key", owners[0]}, casArgs...)...); !strings.Contains(out, "CAS is ready") {
		t.Errorf("second share: %s", out)
	}
	second := filepath.Join(dir, "second")
	if _, err := attest(second); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"root-ca.pem", "mesh-ca.pem", "env", "files/etc/web/tls.pem"} {
		if readFile(t, filepath.Join(first, f)) != readFile(t, filepath.Join(second, f)) {
			t.Errorf("%s changed across recovery", f)
		}
	}
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := run(t, args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return out
}

// Without a certificate, CAS is trusted by its evidence: simulated
// evidence only with --insecure-simulated-cas and the CAS's simulation key
// (another's is refused), which warns; the flags say where and how when
// they are missing.
func TestCASTrustedByEvidence(t *testing.T) {
	dir := t.TempDir()
	url, _, _ := castest.Start(t, filepath.Join(dir, "state"), "none")
	_, pub := keygen(t, dir, "r.pem")
	pubFile := filepath.Join(dir, "r.pub.pem")
	if err := os.WriteFile(pubFile, []byte(pub), 0o644); err != nil {
		t.Fatal(err)
	}
	simPub := filepath.Join(dir, "state", cas.SimulationPubKeyFile)
	other := filepath.Join(dir, "other")
	castest.Start(t, other, "none")
	otherPub := filepath.Join(other, cas.SimulationPubKeyFile)
	initArgs := []string{"cas", "init", "--recovery-owner", pubFile, "--out", filepath.Join(dir, "shares.json"), "--cas", url,
		"--init-token-file", filepath.Join(dir, "state", cas.InitTokenFile)}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "say how to trust CAS: --cas-ca FILE"},
		{[]string{"--cluster", "ns/cas"}, "say where CAS is"},
		{[]string{"--cas-identity", writeFile(t, dir, "id.yaml", "identities: [{type: sgx, mrenclave: "+strings.Repeat("ab", 32)+"}]\n")}, "simulation: "},
		// An identity no evidence can meet is refused before CAS is asked.
		{[]string{"--cas-identity", writeFile(t, dir, "loose.yaml", "identities: [{type: sgx}]\n")}, "an sgx identity pins the enclave"},
		{[]string{"--cas-identity", writeFile(t, dir, "bad.yaml", "identitys: []\n")}, `--cas-identity`},
		{[]string{"--insecure-simulated-cas"}, "name CAS's simulation key with --cas-sim-key"},
		{[]string{"--cas-sim-key", simPub}, "--cas-sim-key goes with --insecure-simulated-cas"},
		// Another simulated CAS's key: the one at the address is not it.
		{[]string{"--insecure-simulated-cas", "--cas-sim-key", otherPub}, "which is not pinned"},
	} {
		_, _, err := run(t, append(append([]string{}, initArgs...), tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
	out, errOut, err := run(t, append(initArgs, "--insecure-simulated-cas", "--cas-sim-key", simPub)...)
	if err != nil || !strings.Contains(out, "CAS initialised") || !strings.Contains(errOut, "simulated evidence") || !strings.Contains(errOut, "insecure") {
		t.Errorf("init trusting simulated evidence: %v\n%s\n%s", err, out, errOut)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// cloister cas board: a minority of the board changes nothing; a
// majority replaces it, and then only the new board approves new names.
func TestCASBoardCommand(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	url, ca, _ := castest.StartConfig(t, cas.Config{StateDir: state, Sealer: "none"})
	casArgs := []string{"--cas", url, "--cas-ca", ca}
	initArgs := []string{"cas", "init", "--out", filepath.Join(dir, "shares.json"), "--init-token-file", filepath.Join(state, cas.InitTokenFile)}
	var members []string
	for _, name := range []string{"r1", "r2", "r3"} {
		key, pub := keygen(t, dir, name+".pem")
		members = append(members, key)
		initArgs = append(initArgs, "--recovery-owner", writeFile(t, dir, name+".pub.pem", pub))
	}
	mustRun(t, append(initArgs, casArgs...)...)
	newKey, newPub := keygen(t, dir, "new-board.pem")
	newPubFile := writeFile(t, dir, "new-board.pub.pem", newPub)

	if _, _, err := run(t, append([]string{"cas", "board", "--key", members[0], "--board", newPubFile}, casArgs...)...); err == nil ||
		!strings.Contains(err.Error(), "signed by 1 of the board's 3 keys, 2 (its threshold, and at least a majority) needed") {
		t.Errorf("one of three: %v", err)
	}
	out := mustRun(t, append([]string{"cas", "board", "--key", members[0], "--key", members[2], "--board", newPubFile}, casArgs...)...)
	if !strings.Contains(out, "the board is at version 1, 1 of its keys approve a name: sha256:") {
		t.Errorf("a majority: %s", out)
	}

	owner, ownerPub := keygen(t, dir, "owner.pem")
	policyFile := writeFile(t, dir, "policy.yaml", "version: cloister.dev/policy/v1\nname: shop\nowners:\n  keys:\n  - |\n"+indent(ownerPub)+
		"\nservices: []\n")
	signed := writeFile(t, dir, "signed.yaml", mustRun(t, "policy", "sign", "--key", owner, "--version", "1", policyFile))
	byOld := writeFile(t, dir, "by-old.yaml", mustRun(t, "policy", "sign", "--key", members[1], signed))
	if _, _, err := run(t, append([]string{"cas", "register", byOld}, casArgs...)...); err == nil || !strings.Contains(err.Error(), "is not among the keys that may approve version 1") {
		t.Errorf("a new name approved by a member of the old board: %v", err)
	}
	byNew := writeFile(t, dir, "by-new.yaml", mustRun(t, "policy", "sign", "--key", newKey, signed))
	if out := mustRun(t, append([]string{"cas", "register", byNew}, casArgs...)...); !strings.Contains(out, "policy shop registered: version 1") {
		t.Errorf("a new name approved by the new board: %s", out)
	}
}
