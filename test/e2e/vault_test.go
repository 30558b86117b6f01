//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/transit"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/image"
	vaultcontroller "github.com/cloister-cc/cloister/internal/operator/controller/vault"
	"github.com/cloister-cc/cloister/internal/operator/health"
	"github.com/cloister-cc/cloister/internal/workload/vaultinit"
)

// vaultImage builds the Vault server from its pinned module (the
// toolchain's cache), packs it as an image with the image tooling and
// imports it into the node; it returns its digest-pinned reference.
func (e *realNodeEnv) vaultImage(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	vt := tools(t).VaultServer()
	if err := vt.Ensure(ctx, os.Stderr); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b, err := image.BuildTo(image.Spec{Name: "vault", Binary: vt.Path("vault"), Version: imageVersion, Licenses: "MPL-2.0"}, t.TempDir(), image.DefaultRegistry)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.node.Import(ctx, b.File); err != nil {
		t.Fatal(err)
	}
	t.Logf("the Vault image built and imported in %s", time.Since(start).Round(time.Millisecond))
	return b.Pinned()
}

// A Vault resource of three replicas on the real node, its pods in the
// sim runtime: after `cas init` and the owners' (and, for its new name,
// the board's) signature of the policy `cloister vault policy` makes, it
// becomes HEALTHY with no human step; a workload with a CAS certificate
// writes and reads a secret over TLS that chains to CAS's root; CAS's
// transit endpoint gives that workload nothing; CAS restarts, every Vault
// pod is deleted, and it comes back unsealed with the secret intact. The
// recovery keys exist only sealed to the owner, and no key reaches a
// log, event, status or Secret.
func testVault(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	vaultImg := e.vaultImage(t)
	runtimeClass := installSimRuntime(t, e)

	// A CAS of its own that restarts without its owners (its seed sealed
	// to the node), and a developer's key that quotes for the client.
	cas := simCAS("cas-vault")
	cas.Spec.Persistence.Enabled = true
	devKey := filepath.Join(work.dir, "vault-dev-sim.pem")
	cas.Spec.SimulationKeys = []string{e.mustCLI(t, "policy", "keygen", "--out", devKey)}
	if err := e.crs.Create(ctx, cas); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, e.crs, cas, health.IsHealthy, health.ReasonCASUninitialized)
	at := []string{"--cluster", "default/cas-vault", "--insecure-simulated-cas"}
	initArgs := append([]string{"cas", "init", "--threshold", "2", "--out", filepath.Join(work.dir, "vault-cas-shares.json")}, at...)
	for _, k := range work.recoveryKeys {
		initArgs = append(initArgs, "--recovery-owner", k+".pub")
	}
	e.mustCLI(t, initArgs...)
	waitState(t, e.crs, cas, common.StateHealthy)
	waitLASPinned(t, e, "cas-vault")

	owner := filepath.Join(work.dir, "vault-owner.pem")
	ownerPub := e.mustCLI(t, "policy", "keygen", "--out", owner)
	v := &servicesv1beta1.Vault{ObjectMeta: metav1.ObjectMeta{Name: "vault", Namespace: "default"}, Spec: servicesv1beta1.VaultSpec{
		ServiceSpec: common.ServiceSpec{Image: vaultImg, ImagePullPolicy: corev1.PullIfNotPresent, NodeSelector: common.NodeSelector{cluster.LabelRealNode: "true"}},
		CAS:         servicesv1beta1.VaultCAS{Name: "cas-vault"}, RuntimeClassName: runtimeClass, Replicas: 3,
		Policy: servicesv1beta1.VaultPolicy{Owners: []string{ownerPub}},
	}}
	start := time.Now()
	if err := e.crs.Create(ctx, v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpVaultPods(t, e)
		}
	})
	waitFor(t, "the Vault to publish its policy", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		if err := e.crs.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
			return false, err.Error(), nil
		}
		return v.Status.PolicyDigest != "", fmt.Sprintf("%s %v", v.Status.State, notDesired(v.Status.Conditions)), nil
	})
	// The owner makes the policy from the spec, with the initializer they
	// trust, signs it, and the board approves its new name.
	doc := e.mustCLI(t, "vault", "policy", "default/vault", "--initializer-image", pinned(t, e.built, "cloister-initializer"))
	signed := e.signPolicyFor(t, "cas-vault.default.svc:8081", "vault", doc, owner, "")
	applied := time.Now()
	e.applyFile(t, signed)
	waitFor(t, "the Vault to be HEALTHY", 6*time.Minute, inState(e.crs, v, common.StateHealthy))
	t.Logf("Vault HEALTHY %s after the signed policy's apply (%s after the resource's)", time.Since(applied).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for _, typ := range []health.ConditionType{health.VaultAttested, health.VaultInitialized, health.VaultUnsealed, health.VaultQuorum} {
		if c := healthyCondition(&v.Status.ServiceStatus, typ); c.Status != metav1.ConditionTrue {
			t.Errorf("%s: %s %s", typ, c.Status, c.Reason)
		}
	}
	if v.Status.ReadyReplicas != 3 || v.Status.SealedReplicas != 0 || v.Status.Leader == "" || v.Status.RecoveryKeysSecret == "" {
		t.Errorf("status %+v", v.Status)
	}
	if got, err := kubectl(t, e.c, "get", "vault", "vault", "-n", "default", "-o", "wide"); err != nil || !strings.Contains(got, "HEALTHY") || !strings.Contains(got, v.Status.Leader) {
		t.Errorf("kubectl get vault: %v\n%s", err, got)
	}

	// The recovery key opens for the owner alone.
	secret, err := e.cs.CoreV1().Secrets("default").Get(ctx, v.Status.RecoveryKeysSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bundle := writeFile(t, filepath.Join(work.dir, "vault-recovery.json"), string(secret.Data["recovery.json"]))
	recoveryKey := strings.TrimSpace(e.mustCLI(t, "vault", "recovery-key", "--key", owner, "--bundle", bundle))
	if raw, err := base64.StdEncoding.DecodeString(recoveryKey); err != nil || len(raw) < 16 {
		t.Errorf("the owner's recovery key: %d bytes, %v", len(raw), err)
	}
	if _, err := e.cli("vault", "recovery-key", "--key", work.owner, "--bundle", bundle); err == nil {
		t.Error("another key opened the recovery key")
	}

	// A workload of the namespace, with its CAS certificate: the
	// developer's quote for a policy of its own.
	clientDoc := "version: cloister.dev/policy/v1\nname: default/vault-client\nowners:\n  keys:\n  - |\n" + indent(ownerPub, "    ") +
		"allowSimulation: true\nservices:\n- name: web\n  attestation: {identities: []}\n  certificate: {sans: [web.vault-client.svc], validity: 24h}\n"
	e.mustCLI(t, append([]string{"cas", "register", e.signPolicyFor(t, "cas-vault.default.svc:8081", "vault-client", clientDoc, owner, "")}, at...)...)
	certDir := filepath.Join(work.dir, "vault-client")
	e.mustCLI(t, append([]string{"cas", "attest", "--policy", "default/vault-client", "--service", "web", "--sim", "--sim-key", devKey, "--out", certDir}, at...)...)
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, casclient.CertChainFile), filepath.Join(certDir, casclient.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(mustReadBytes(t, filepath.Join(certDir, casclient.RootCAFile))) {
		t.Fatal("CAS's root CA")
	}
	vaultAPI := func() *vaultinit.API {
		pod, err := e.cs.CoreV1().Pods("default").Get(ctx, "vault-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The Service's name, which the replicas' certificate from CAS
		// names; the test dials a replica (there is no Service proxy).
		return vaultinit.NewAPI(net.JoinHostPort(pod.Status.PodIP, "8200"),
			&tls.Config{RootCAs: roots, ServerName: "vault.default.svc", Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	}
	api := vaultAPI()
	if err := api.Login(ctx, vaultinit.ClientsRole); err != nil {
		t.Fatalf("the workload's login with its CAS certificate: %v", err)
	}
	if err := api.PutSecret(ctx, "shop/db", map[string]string{"password": "correct horse battery staple"}); err != nil {
		t.Fatal(err)
	}

	// CAS's transit endpoint gives the workload nothing: its certificate
	// is not of the Vault's service.
	testTransitRefusesOthers(t, e, cert, roots)

	// CAS restarts; then every Vault pod goes.
	casPod, err := e.cs.CoreV1().Pods("default").Get(ctx, conn.PodName("cas-vault"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().Pods("default").Delete(ctx, casPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "default", casPod.Name, "to run again", 2*time.Minute, func(p *corev1.Pod) bool { return p.UID != casPod.UID && podReady(p) })
	waitState(t, e.crs, cas, common.StateHealthy)
	old := map[string]string{}
	for i := range 3 {
		name := fmt.Sprintf("vault-%d", i)
		p, err := e.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		old[name] = string(p.UID)
	}
	deleted := time.Now()
	if err := e.cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=cloister-vault-vault"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every Vault pod replaced, ready and unsealed", 6*time.Minute, func(ctx context.Context) (bool, string, error) {
		var notYet []string
		for name, uid := range old {
			p, err := e.cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || string(p.UID) == uid || !podReady(p) {
				notYet = append(notYet, name)
			}
		}
		return len(notYet) == 0, fmt.Sprint("not yet: ", notYet), nil
	})
	unsealed := time.Since(deleted)
	waitFor(t, "the Vault to be HEALTHY again", 3*time.Minute, inState(e.crs, v, common.StateHealthy))
	t.Logf("after CAS restarted and every Vault pod was deleted: all replicas ready (unsealed) in %s, HEALTHY in %s",
		unsealed.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))
	api = vaultAPI()
	if err := api.Login(ctx, vaultinit.ClientsRole); err != nil {
		t.Fatal(err)
	}
	if got, err := api.Secret(ctx, "shop/db"); err != nil || got["password"] != "correct horse battery staple" {
		t.Errorf("the secret after the restarts: %v %v", got, err)
	}

	noVaultKeysAnywhere(t, e, v, recoveryKey)

	if err := e.crs.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Vault's pods to be gone", 2*time.Minute, func(ctx context.Context) (bool, string, error) {
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=cloister-vault-vault"})
		return err == nil && len(pods.Items) == 0, fmt.Sprint(err, len(pods.Items)), nil
	})
	removeSimRuntime(t, e, runtimeClass)
}

// testTransitRefusesOthers: a workload's certificate of another service,
// or none, encrypts nothing with the Vault's seal key at CAS.
func testTransitRefusesOthers(t *testing.T, e *realNodeEnv, cert tls.Certificate, roots *x509.CertPool) {
	t.Helper()
	ctx := context.Background()
	pod, err := e.cs.CoreV1().Pods("default").Get(ctx, conn.PodName("cas-vault"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil || len(leaf.URIs) == 0 {
		t.Fatalf("the workload's certificate names no trust domain: %v", err)
	}
	body, _ := json.Marshal(map[string]string{"plaintext": base64.StdEncoding.EncodeToString([]byte("a seal key"))})
	for name, certs := range map[string][]tls.Certificate{"another service's certificate": {cert}, "no certificate": nil} {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: leaf.URIs[0].Host, Certificates: certs, MinVersion: tls.VersionTLS13}}}
		url := "https://" + net.JoinHostPort(pod.Status.PodIP, "8081") + "/v1/" + transit.Mount + "/encrypt/" + vaultcontroller.SealKey
		res, err := hc.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			// Only a connection without a certificate may be refused in the
			// handshake: the workload's must reach the endpoint and be refused there.
			if certs != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		_ = res.Body.Close()
		if res.StatusCode < 400 || out["data"] != nil {
			t.Errorf("%s: CAS's transit endpoint answered %d %v", name, res.StatusCode, out)
		}
		t.Logf("%s: CAS's transit endpoint refused with %d %v", name, res.StatusCode, out["errors"])
	}
}

// noVaultKeysAnywhere: the owner's recovery key and Vault's root token
// (hvs.) are in no log of the Vault's pods, no event, the status, or a
// Secret in plain text.
func noVaultKeysAnywhere(t *testing.T, e *realNodeEnv, v *servicesv1beta1.Vault, recoveryKey string) {
	t.Helper()
	ctx := context.Background()
	var texts []string
	pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=cloister-vault-vault"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			out, _ := kubectl(t, e.c, "logs", "-n", "default", p.Name, "-c", c.Name)
			texts = append(texts, p.Name+"/"+c.Name+": "+out)
		}
	}
	events, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.Items {
		texts = append(texts, "event: "+ev.Message)
	}
	st, _ := json.Marshal(v.Status)
	texts = append(texts, "status: "+string(st))
	secrets, err := e.cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for k, d := range s.Data {
			texts = append(texts, "secret "+s.Name+"/"+k+": "+string(d))
		}
	}
	raw, _ := base64.StdEncoding.DecodeString(recoveryKey)
	for _, text := range texts {
		if strings.Contains(text, recoveryKey) || (len(raw) > 0 && strings.Contains(text, string(raw))) || strings.Contains(text, "hvs.") {
			t.Errorf("a recovery key or token in %.200s", text)
		}
	}
	if len(texts) < 10 {
		t.Errorf("only %d texts read", len(texts))
	}
}

// dumpVaultPods logs what the Vault's pods say, for a failed run.
func dumpVaultPods(t *testing.T, e *realNodeEnv) {
	pods, err := e.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=cloister-vault-vault"})
	if err != nil {
		t.Logf("the Vault's pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s: %s", p.Name, podSummary(&p))
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			out, _ := kubectl(t, e.c, "logs", "-n", "default", p.Name, "-c", c.Name, "--tail", "30")
			t.Logf("%s/%s:\n%s", p.Name, c.Name, out)
		}
	}
}
