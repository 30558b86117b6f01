package cas

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest/sim"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/base/tee"
	"github.com/cloister-cc/cloister/internal/cas"
	"github.com/cloister-cc/cloister/internal/cas/castest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/dev/testenv"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/health"
)

var envConfig *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"../../../../charts/cloister-operator/files/crds"}}, &envConfig))
}

// The CAS kind reads the state of a real cloister-cas through the pod the
// API server lists (its IP stands for the loopback address here), trusting
// it only by evidence the CR allows: a CAS that waits for init says what
// to run, is ready after it, and a simulated CAS is not trusted by a CR
// that did not ask for simulation.
func TestFillStatusFromTheRunningCAS(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, basev1beta1.AddToScheme, servicesv1beta1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(envConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var url, caFile, casAddr string
	dial := func(podAddress string) casclient.DialFunc {
		if podAddress != "10.9.8.7:8081" {
			t.Errorf("dialled %s, want the pod's IP and CAS's port", podAddress)
		}
		return conn.DialTo(casAddr)
	}
	k := &Kind{Base: service.Base{Reader: c}, Writer: c, Dial: dial}
	cr := casCR(func(c *servicesv1beta1.CAS) {
		c.Namespace = "default"
		c.Spec.Simulation = true
		c.UID = "5e5e5e5e-0000-4000-8000-000000000001"
	})
	token := func() string {
		var sec corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: conn.InitTokenSecret(cr.Name)}, &sec); err != nil {
			t.Fatalf("the init token Secret: %v", err)
		}
		return string(sec.Data[conn.InitTokenKey])
	}

	obs := k.FillStatus(ctx, cr, nil)
	if obs.Status != health.Unknown || obs.Reason != health.ReasonCASUnreachable {
		t.Errorf("before the pod exists: %+v", obs)
	}
	// The init token is there before the pod that mounts it.
	first := token()
	if len(first) < 40 {
		t.Errorf("init token %d characters", len(first))
	}
	k.FillStatus(ctx, cr, nil)
	if token() != first {
		t.Error("the init token changed before CAS was initialised")
	}
	// The simulation key: published in the status, then in the Secret
	// the pod mounts and the ConfigMap with the LAS nodes' keys.
	published := cr.Status.SimulationKey
	if _, err := keyfile.ParsePublic([]byte(published)); err != nil {
		t.Fatalf("status.simulationKey %q: %v", published, err)
	}
	lasKey := castest.LASKey()
	lasCR := &basev1beta1.LAS{ObjectMeta: metav1.ObjectMeta{Name: "las"}}
	if err := c.Create(ctx, lasCR); err != nil {
		t.Fatal(err)
	}
	lasCR.Status.Nodes = map[string]basev1beta1.LASNode{"node-a": {Pod: "las-x", Ready: true, SimulationKey: string(policy.MarshalPublicKey(&lasKey.PublicKey))}}
	if err := c.Status().Update(ctx, lasCR); err != nil {
		t.Fatal(err)
	}
	k.FillStatus(ctx, cr, nil)
	if cr.Status.SimulationKey != published {
		t.Errorf("the simulation key changed: %q, was %q", cr.Status.SimulationKey, published)
	}
	state := t.TempDir()
	keyFile, workloadsFile := mounted(t, c, cr, state)
	priv, err := keyfile.LoadOrCreate(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if pub := string(policy.MarshalPublicKey(&priv.PublicKey)); pub != published {
		t.Errorf("the Secret's key is not status.simulationKey's:\n%s\n%s", pub, published)
	}
	// Another simulated CAS (its own key) at the pod's address is not
	// this one.
	impostor, _, _ := castest.Start(t, t.TempDir(), "none")
	casAddr = strings.TrimPrefix(impostor, "https://")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cas-probe", Labels: map[string]string{tee.LabelSimulatedNode: "true"}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: conn.PodName(cr.Name)},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "cas", Image: "cas"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.9.8.7"}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// A dev cluster's simulated node runs nothing: its pod's address is
	// not dialled (the Dial above would fail the test for any other).
	k.Dial = func(podAddress string) casclient.DialFunc {
		t.Errorf("dialled %s on a simulated node", podAddress)
		return conn.DialTo("127.0.0.1:1")
	}
	obs = k.FillStatus(ctx, cr, nil)
	if obs.Reason != health.ReasonCASUnreachable || !strings.Contains(obs.Message, "cas-probe, a simulated node: nothing runs there") {
		t.Errorf("a CAS pod on a simulated node: %+v", obs)
	}
	delete(node.Labels, tee.LabelSimulatedNode)
	if err := c.Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	k.Dial = dial
	obs = k.FillStatus(ctx, cr, nil)
	if obs.Reason != health.ReasonCASNotAttested || !strings.Contains(obs.Message, "which is not pinned") {
		t.Errorf("a simulated CAS signing with another key: %+v", obs)
	}

	casCfg := cas.Config{StateDir: state, Sealer: "file:" + filepath.Join(t.TempDir(), "seed.sealed"), Simulation: true, SimulationKeyFile: keyFile, SimKeys: workloadsFile}
	url, caFile, stop := castest.StartConfig(t, casCfg)
	casAddr = strings.TrimPrefix(url, "https://")
	obs = k.FillStatus(ctx, cr, nil)
	if want := []string{sim.Fingerprint(&lasKey.PublicKey)}; !slices.Equal(cr.Status.SimulationKeys, want) {
		t.Errorf("status.simulationKeys %v, want the LAS node's %v", cr.Status.SimulationKeys, want)
	}
	if obs.Reason != health.ReasonCASUninitialized || !strings.Contains(obs.Message, "cloister cas init --cluster default/cas") ||
		cr.Status.CASState != "uninitialized" || cr.Status.Version == "" {
		t.Errorf("uninitialised CAS: %+v, status %+v", obs, cr.Status)
	}
	if k.PollAfter(cr) != pollWaiting {
		t.Errorf("a waiting CAS is polled every %s", k.PollAfter(cr))
	}

	ca, _ := os.ReadFile(caFile)
	admin, err := casclient.New(url, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := policy.NewKey()
	if _, err := admin.Init(context.Background(), []string{string(policy.MarshalPublicKey(&rec.PublicKey))}, 1, castest.InitToken(t, filepath.Dir(caFile)), castest.BoardPEM()); err != nil {
		t.Fatal(err)
	}
	obs = k.FillStatus(ctx, cr, nil)
	if obs.Status != health.True || !strings.Contains(obs.Message, "simulated evidence (insecure") || cr.Status.CASState != "ready" || cr.Status.InitializedAt == nil {
		t.Errorf("initialised CAS: %+v, status %+v", obs, cr.Status)
	}
	// Used once, the token is emptied and never made again, even when
	// its Secret is gone: after a loss only the recovery owners initialise
	// CAS anew.
	if used := token(); used != "" || first == "" {
		t.Errorf("the init token after init: %q (was %q)", used, first)
	}
	if cr.Status.StateGeneration < 1 || cr.Status.CASStateAlert != 0 {
		t.Errorf("the state's generation %d, alert %d", cr.Status.StateGeneration, cr.Status.CASStateAlert)
	}
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cr.Namespace, Name: conn.InitTokenSecret(cr.Name)}}); err != nil {
		t.Fatal(err)
	}
	k.FillStatus(ctx, cr, nil)
	var gone corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: conn.InitTokenSecret(cr.Name)}, &gone); !apierrors.IsNotFound(err) {
		t.Errorf("the init token Secret made again after CAS was initialised: %v %q", err, gone.Data[conn.InitTokenKey])
	}
	// An older operator renewed the token after the init: this one, at
	// its start, empties it once.
	renewed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cr.Namespace, Name: conn.InitTokenSecret(cr.Name)},
		Data: map[string][]byte{conn.InitTokenKey: []byte("a-token-an-older-operator-renewed")}}
	if err := c.Create(ctx, renewed); err != nil {
		t.Fatal(err)
	}
	(&Kind{Base: service.Base{Reader: c}, Writer: c, Dial: dial}).FillStatus(ctx, cr, nil)
	if got := token(); got != "" {
		t.Errorf("a token an older operator renewed, after this one's first look: %q", got)
	}
	if k.PollAfter(cr) != pollReady {
		t.Errorf("a ready CAS is polled every %s", k.PollAfter(cr))
	}

	// The operator remembers CAS's log: a CAS whose whole state, its mark
	// included, is put back older shows a smaller log, and is refused.
	if !strings.Contains(cr.Status.LogCheckpoint, ".cloister/log\n1\n") { // the init
		t.Errorf("status.logCheckpoint %q", cr.Status.LogCheckpoint)
	}
	stop()
	backup := t.TempDir()
	if err := os.CopyFS(backup, os.DirFS(state)); err != nil {
		t.Fatal(err)
	}
	url, _, stop = castest.StartConfig(t, casCfg)
	casAddr = strings.TrimPrefix(url, "https://")
	if admin, err = casclient.New(url, ca, nil); err != nil {
		t.Fatal(err)
	}
	doc := "version: cloister.dev/policy/v1\nname: shop\nowners: {keys: []}\nservices: [{name: web, attestation: {identities: [{type: sgx, mrenclave: \"" + strings.Repeat("11", 32) + "\"}]}, certificate: {sans: [web]}}]\n"
	signed := &policy.Signed{Policy: doc, Link: policy.Link{Version: 1}}
	if err := policy.Sign(signed, castest.BoardKey()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RegisterPolicy(ctx, wire.PolicyRequest{Policy: signed.Policy, Link: signed.Link, Signatures: signed.Signatures}); err != nil {
		t.Fatal(err)
	}
	if obs = k.FillStatus(ctx, cr, nil); obs.Status != health.True || !strings.Contains(cr.Status.LogCheckpoint, ".cloister/log\n2\n") {
		t.Errorf("after a registration: %+v, status.logCheckpoint %q", obs, cr.Status.LogCheckpoint)
	}
	stop()
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(state, os.DirFS(backup)); err != nil {
		t.Fatal(err)
	}
	url, _, _ = castest.StartConfig(t, casCfg)
	casAddr = strings.TrimPrefix(url, "https://")
	obs = k.FillStatus(ctx, cr, nil)
	if obs.Reason != health.ReasonCASLogRolledBack || !strings.Contains(obs.Message, "size 1") || !strings.Contains(obs.Message, "size 2") || cr.Status.CASStateAlert != 1 {
		t.Errorf("a CAS put back older: %+v, alert %d", obs, cr.Status.CASStateAlert)
	}

	cr.Spec.Simulation = false
	obs = k.FillStatus(ctx, cr, nil)
	if cr.Status.SimulationKey != "" {
		t.Errorf("status.simulationKey %q without simulation", cr.Status.SimulationKey)
	}
	if obs.Status != health.False || obs.Reason != health.ReasonCASNotAttested || !strings.Contains(obs.Message, "simulation") || cr.Status.CASState != "" {
		t.Errorf("a simulated CAS under a CR without simulation: %+v, state %q", obs, cr.Status.CASState)
	}
}

// mounted writes the simulation key Secret and the workload keys of the
// ConfigMap the operator made for cr into dir, as the kubelet mounts
// them into the CAS pod.
func mounted(t *testing.T, c client.Client, cr *servicesv1beta1.CAS, dir string) (keyFile, workloadsFile string) {
	t.Helper()
	ctx := context.Background()
	var sec corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: conn.SimulationKeySecret(cr.Name)}, &sec); err != nil {
		t.Fatalf("the simulation key Secret: %v", err)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: conn.SimulationConfigMap(cr.Name)}, &cm); err != nil {
		t.Fatalf("the simulation ConfigMap: %v", err)
	}
	if cm.Data[conn.CASKeyItem] != cr.Status.SimulationKey {
		t.Errorf("the ConfigMap's %s is not status.simulationKey", conn.CASKeyItem)
	}
	keyFile, workloadsFile = filepath.Join(dir, "key.pem"), filepath.Join(dir, "workloads.pem")
	if err := os.WriteFile(keyFile, sec.Data[conn.SimulationKeyKey], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(workloadsFile, []byte(cm.Data[conn.WorkloadKeysItem]), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile, workloadsFile
}
