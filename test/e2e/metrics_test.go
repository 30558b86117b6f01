//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testOperatorMetrics scrapes the installed operator's metrics as Prometheus
// would, with a ServiceAccount token: one bound to the chart's
// metrics-reader role gets them; no token, and the token of an account
// without the role, get nothing.
func testOperatorMetrics(t *testing.T, e *realNodeEnv) {
	ctx := context.Background()
	pods, err := e.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=cloister-operator"})
	if err != nil || len(pods.Items) == 0 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("operator pods: %v", err)
	}
	url := fmt.Sprintf("https://%s:8443/metrics", pods.Items[0].Status.PodIP)
	const ns = "metrics-scrape"
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		_ = e.cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), "metrics-scrape", metav1.DeleteOptions{})
	})
	token := func(name string) string {
		t.Helper()
		if _, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ttl := int64(600)
		tr, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, stranger := token("prometheus"), token("stranger")
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-scrape"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cloister-operator-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The operator's serving certificate is its own, self-signed: what is
	// under test is who gets the metrics.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	scrape := func(bearer string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		res, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = res.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<20))
		return res.StatusCode, string(body)
	}
	// RBAC reaches the authorizer's cache within seconds.
	waitFor(t, "the bound ServiceAccount to scrape the operator's metrics", time.Minute, func(context.Context) (bool, string, error) {
		code, body := scrape(prometheus)
		return code == http.StatusOK && strings.Contains(body, "controller_runtime_reconcile_total"), fmt.Sprintf("%d %.200s", code, body), nil
	})
	if code, body := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %.200s, want 401", code, body)
	}
	if code, body := scrape(stranger); code != http.StatusForbidden {
		t.Errorf("a ServiceAccount without the metrics-reader role: %d %.200s, want 403", code, body)
	}
}
