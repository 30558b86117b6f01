package vault

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/dev/toolchain"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

// podQuoter is LAS's simulated evidence for a pod of the given policy
// digest (its host data), as the initializer gets it.
type podQuoter struct {
	q        *sim.Quoter
	hostData []byte
}

func (p podQuoter) Quote(_ context.Context, reportData []byte) (attest.Evidence, error) {
	return p.q.QuoteFor(reportData, p.hostData)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// A real Vault server (v1.14.2, built from its module) configured by the
// file of the policy the owners sign, its seal at a real CAS, with the
// bootstrap beside it: no human initialises or unseals it; the recovery
// keys exist only sealed to the owners; the operator's probe trusts it
// by CAS's certificate for the Vault's service; a workload of the
// namespace logs in with its CAS certificate and writes and reads a
// secret, one of another namespace gets nothing; restarted (CAS too),
// Vault unseals itself through CAS with the secret intact.
func TestRealVaultUnsealedByCAS(t *testing.T) {
	tc, err := toolchain.Locate()
	if err != nil {
		t.Fatal(err)
	}
	// A cold build of Vault takes about four minutes on 2 cores, longer
	// beside other tests: it has its own bound.
	build, built := context.WithTimeout(context.Background(), 30*time.Minute)
	defer built()
	vt := tc.VaultServer()
	if err := vt.Ensure(build, testWriter{t}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// CAS, initialised, its board approving the namespace's names.
	casDir := t.TempDir()
	// The seed in a plain file (development sealing): CAS unseals itself
	// when it starts again.
	sealer := "file:" + filepath.Join(t.TempDir(), "seed")
	casURL, caFile, stopCAS := castest.Start(t, casDir, sealer)
	casPEM, _ := os.ReadFile(caFile)
	c, err := casclient.New(casURL, casPEM, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := policy.NewKey()
	if _, err := c.Init(ctx, []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, casDir), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	owner, _ := policy.NewKey()
	register := func(doc *policy.Document) {
		t.Helper()
		link, err := c.LinkFor(ctx, doc.Name, doc.Digest())
		if err != nil {
			t.Fatal(err)
		}
		s := &policy.Signed{Policy: string(doc.Canonical()), Link: link}
		for _, k := range []*ecdsa.PrivateKey{owner, castest.BoardKey()} {
			if err := policy.Sign(s, k); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.RegisterPolicy(ctx, wire.PolicyRequest{Policy: s.Policy, Link: s.Link, Signatures: s.Signatures}); err != nil {
			t.Fatalf("registering %s: %v", doc.Name, err)
		}
	}

	// The Vault's policy as the operator publishes it, signed by its
	// owner; one replica on loopback ports.
	port := freePort(t)
	v := &servicesv1beta1.Vault{}
	v.Namespace, v.Name = "shop", "secrets"
	v.Spec.Replicas, v.Spec.Service.Port = 1, int32(port) //nolint:gosec // a port
	v.Spec.Policy.Owners = []string{string(policy.MarshalPublicKey(&owner.PublicKey))}
	digest := bytes.Repeat([]byte{7}, 32)
	casHost := strings.TrimPrefix(casURL, "https://")
	doc, err := Policy(v, PolicyInput{Platform: runtimeclass.Sim, Digest: fmt.Sprintf("%x", digest), CAS: casHost})
	if err != nil {
		t.Fatal(err)
	}
	register(doc)
	svc, _ := ServiceName(v)
	quoter := podQuoter{&sim.Quoter{Key: castest.LASKey()}, digest}

	// The pod: attested as the initializer does, its files in tls/.
	pod := t.TempDir()
	tlsDir, dataDir := filepath.Join(pod, "tls"), filepath.Join(pod, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	res, err := c.Attest(ctx, "shop/secrets", svc, quoter, tlsDir)
	if err != nil {
		t.Fatalf("attesting the Vault's pod: %v", err)
	}
	// Vault's configuration is CAS's rendering of the policy's file; only
	// the pod's folders move to the test's.
	cfg := strings.NewReplacer("/cloister/tls-config/", tlsDir+"/", DataDir, dataDir, "[::]", "127.0.0.1").Replace(res.Files[ConfigFile])
	if !strings.Contains(cfg, `tls_server_name = "cas-`) {
		t.Fatalf("CAS did not render its server name into the seal:\n%s", cfg)
	}
	cfgFile := filepath.Join(pod, "vault.hcl")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	host0 := ReplicaHost(v, 0)
	var vaultLog testenv.Buffer
	var exited chan struct{}
	startVault := func() (stop func()) {
		cmd := exec.CommandContext(ctx, vt.Path("vault"), "server", "-config="+cfgFile)
		cmd.Env = append(os.Environ(), "VAULT_API_ADDR=https://"+host0+":"+strconv.Itoa(port),
			"VAULT_CLUSTER_ADDR=https://"+host0+":"+strconv.Itoa(port+1), "VAULT_RAFT_NODE_ID=secrets-0", "HOME="+pod)
		cmd.Stdout, cmd.Stderr = &vaultLog, &vaultLog
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		exited = done
		go func() { _ = cmd.Wait(); close(done) }()
		return func() { _ = cmd.Process.Signal(os.Interrupt); <-done }
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(res.RootCA))
	want := MeshName{Policy: "shop/secrets", Service: svc}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitUnsealed := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			h, err := ReadReplica(ctx, addr, host0, roots, want)
			if err == nil && h.Initialized && !h.Sealed && h.IsSelf {
				// The certificate's validity, which renewal is judged by.
				if life := h.NotAfter.Sub(h.NotBefore); life < time.Hour || time.Until(h.NotAfter) <= 0 {
					t.Errorf("%s: the replica's certificate from %s to %s", what, h.NotBefore, h.NotAfter)
				}
				return time.Since(start)
			}
			select {
			case <-exited:
				t.Fatalf("%s: Vault stopped:\n%s", what, vaultLog.String())
			default:
			}
			if ctx.Err() != nil || time.Since(start) > 3*time.Minute {
				t.Fatalf("%s: Vault not unsealed: %+v %v\n%s", what, h, err, vaultLog.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// First start: the bootstrap initialises it; nobody unseals it.
	stopVault := startVault()
	var bootLog testenv.Buffer
	bctx, stopBoot := context.WithCancel(ctx)
	booted := make(chan error, 1)
	go func() {
		booted <- vaultinit.Run(bctx, vaultinit.Config{Dir: tlsDir, Vault: "shop/secrets", Addr: addr, ServerName: host0, First: true,
			Owners: v.Spec.Policy.Owners, Threshold: 1, DataDir: dataDir, Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(port+2)), Poll: 200 * time.Millisecond},
			slog.New(slog.NewJSONHandler(&bootLog, nil)))
	}()
	t.Logf("first start: initialised and unsealed in %s", waitUnsealed("first start"))
	var bundle []byte
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if bundle, err = replicaAPI(net.JoinHostPort("127.0.0.1", strconv.Itoa(port+2)), host0, roots, want).Recovery(ctx); err == nil &&
			strings.Contains(bootLog.String(), "revoked the root token") {
			break
		}
		select {
		case err := <-booted:
			t.Fatalf("the bootstrap stopped: %v\n%s\n%s", err, bootLog.String(), vaultLog.String())
		default:
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("no recovery bundle: %v\n%s", err, bootLog.String())
		}
	}
	// The operator trusts the replica only as the Vault's service: the
	// same CAS's certificate for another service is not it.
	if _, err := ReadReplica(ctx, addr, host0, roots, MeshName{Policy: "shop/secrets", Service: "web"}); err == nil || !errors.Is(err, errNotVaults) {
		t.Errorf("a replica taken for another service: %v", err)
	}
	b, err := vaultinit.ParseBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	recoveryKey, err := b.Open(owner)
	if err != nil || len(recoveryKey) < 20 {
		t.Fatalf("the owner's recovery key: %v", err)
	}

	// A workload of the namespace logs in with its CAS certificate; one
	// of another namespace, and the Vault's own operator probe, get no
	// token.
	client := func(policyName string) *vaultinit.API {
		t.Helper()
		d := &policy.Document{Version: policy.Version, Name: policyName, Owners: policy.Owners{Keys: v.Spec.Policy.Owners}, AllowSimulation: true,
			Services: []policy.Service{{Name: "web", Attestation: policy.Attestation{Identities: []attest.Identity{{Type: attest.Sim, HostData: digest}}},
				Certificate: policy.Certificate{SANs: []string{"web." + strings.ReplaceAll(policyName, "/", ".")}}}}}
		register(d)
		dir := t.TempDir()
		if _, err := c.Attest(ctx, policyName, "web", quoter, dir); err != nil {
			t.Fatal(err)
		}
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, casclient.CertChainFile), filepath.Join(dir, casclient.KeyFile))
		if err != nil {
			t.Fatal(err)
		}
		return vaultinit.NewAPI(addr, &tls.Config{RootCAs: roots, ServerName: host0, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	}
	web := client("shop/web")
	if err := web.Login(ctx, vaultinit.ClientsRole); err != nil {
		t.Fatalf("the namespace's workload logs in: %v", err)
	}
	if err := web.PutSecret(ctx, "app", map[string]string{"password": "correct horse"}); err != nil {
		t.Fatalf("writing a secret: %v", err)
	}
	read := func() string {
		t.Helper()
		if err := web.Login(ctx, vaultinit.ClientsRole); err != nil {
			t.Fatalf("login: %v", err)
		}
		got, err := web.Secret(ctx, "app")
		if err != nil {
			t.Fatalf("reading the secret: %v", err)
		}
		return got["password"]
	}
	if got := read(); got != "correct horse" {
		t.Fatalf("the secret read back: %q", got)
	}
	if err := client("other/web").Login(ctx, vaultinit.ClientsRole); err == nil {
		t.Error("a workload of another namespace logged in")
	}

	// Every process stops; CAS comes back, then Vault: it unseals itself
	// through CAS, with the secret intact.
	stopBoot()
	if err := <-booted; err != nil {
		t.Errorf("the bootstrap stopped with %v", err)
	}
	stopVault()
	stopCAS()
	castest.StartConfig(t, cas.Config{StateDir: casDir, Sealer: sealer, Simulation: true, SimKeys: castest.LASPubFile(t), Listen: casHost})
	stopVault = startVault()
	defer stopVault()
	t.Logf("after every process restarted: unsealed in %s", waitUnsealed("restart"))
	if got := read(); got != "correct horse" {
		t.Errorf("the secret after the restart: %q", got)
	}

	// A seal that fails stops Vault, and the end of its log (what the
	// kubelet keeps as the termination message) tells the operator why.
	stranger := selfSigned(t, pod)
	for _, c := range []struct {
		name string
		edit func(string) string
		want Failure
	}{
		{"transit key missing", func(s string) string { return strings.Replace(s, `key_name = "`+SealKey+`"`, `key_name = "absent"`, 1) }, SealKeyMissing},
		{"a certificate not of CAS", func(s string) string {
			return strings.NewReplacer(filepath.Join(tlsDir, casclient.CertChainFile), stranger.cert, filepath.Join(tlsDir, casclient.KeyFile), stranger.key).Replace(s)
		}, SealRefused},
		{"CAS unreachable", func(s string) string { return strings.Replace(s, "https://"+casHost, "https://127.0.0.1:1", 1) }, SealCASUnreachable},
	} {
		// Its own folder and ports, beside the running Vault.
		fp := freePort(t)
		own := strings.NewReplacer(dataDir, t.TempDir(),
			`"127.0.0.1:`+strconv.Itoa(port)+`"`, `"127.0.0.1:`+strconv.Itoa(fp)+`"`,
			`"127.0.0.1:`+strconv.Itoa(port+1)+`"`, `"127.0.0.1:`+strconv.Itoa(fp+1)+`"`).Replace(cfg)
		file := filepath.Join(pod, "failing.hcl")
		if err := os.WriteFile(file, []byte(c.edit(own)), 0o600); err != nil {
			t.Fatal(err)
		}
		var out testenv.Buffer
		cmd := exec.CommandContext(ctx, vt.Path("vault"), "server", "-config="+file)
		cmd.Env = append(os.Environ(), "VAULT_RAFT_NODE_ID=failing", "HOME="+pod,
			"VAULT_API_ADDR=https://127.0.0.1:"+strconv.Itoa(fp), "VAULT_CLUSTER_ADDR=https://127.0.0.1:"+strconv.Itoa(fp+1))
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err == nil {
			t.Errorf("%s: Vault started", c.name)
			continue
		}
		msg := out.String()
		if len(msg) > 2048 {
			msg = msg[len(msg)-2048:]
		}
		if got := classify(msg); got != c.want {
			t.Errorf("%s: classified %d, want %d; Vault's last words:\n%s", c.name, got, c.want, msg)
		}
	}

	// Nothing of the keys reached a log.
	for name, log := range map[string]string{"Vault's": vaultLog.String(), "the bootstrap's": bootLog.String()} {
		if strings.Contains(log, string(recoveryKey)) || strings.Contains(log, "hvs.") {
			t.Errorf("%s log carries a key or token:\n%s", name, log)
		}
	}
}

// testWriter shows the toolchain's progress in the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// keyPair is the files of a certificate and its key.
type keyPair struct{ cert, key string }

// selfSigned is a client certificate no CAS issued.
func selfSigned(t *testing.T, dir string) keyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stranger"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := keyPair{cert: filepath.Join(dir, "stranger.pem"), key: filepath.Join(dir, "stranger.key")}
	if err := os.WriteFile(p.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
