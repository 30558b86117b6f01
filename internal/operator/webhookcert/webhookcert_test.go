package webhookcert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cloister-cc/cloister/internal/dev/testenv"
)

// selfSigned is a serving certificate as cert-manager writes it.
func selfSigned(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// With cert-manager issuing, the operator makes no Secret of its own (a
// Secret's type cannot change afterwards) and serves the one cert-manager
// writes, as soon as it is written.
func TestServesCertManagersSecret(t *testing.T) {
	cfg := testenv.Start(t, testenv.Options{})
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "ops", Name: "webhook-cert"}
	dir := t.TempDir()
	s := &Serving{}
	if err := Add(ctx, mgr, s, Options{Secret: key, DNSName: "svc.ops.svc", CertDir: dir, Rotate: false}); err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			t.Error(err)
		}
	}()
	if err := c.Get(ctx, key, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a Secret was made for cert-manager: %v", err)
	}
	if s.Ready(nil) == nil {
		t.Fatal("ready without a certificate")
	}
	crt, k := selfSigned(t, "svc.ops.svc")
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: k}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); s.Ready(nil) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("cert-manager's certificate not served after 20 s")
		}
	}
	got, err := s.GetCertificate(nil)
	if err != nil || got.Leaf == nil && len(got.Certificate) == 0 {
		t.Fatalf("served %v, %v", got, err)
	}
	leaf, err := x509.ParseCertificate(got.Certificate[0])
	if err != nil || leaf.Subject.CommonName != "svc.ops.svc" {
		t.Errorf("served %v, %v", leaf, err)
	}
	if onDisk, err := os.ReadFile(filepath.Join(dir, corev1.TLSCertKey)); err != nil || string(onDisk) != string(crt) {
		t.Errorf("the certificate file: %v", err)
	}
}
