package kubeauth_test

import (
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/kubeauth"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestRealAPIServer: the shipped RBAC against a real kube-apiserver. The
// guard asks with the forwarder's ServiceAccount, bound as the secure-metrics
// component binds it; the platform Prometheus' ServiceAccount may read, a
// ServiceAccount without the binding may not, a forged token is nobody.
func TestRealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	admin := c.Client()
	for _, f := range []string{"../../packaging/rbac/forward.yaml", "../../packaging/rbac/metrics.yaml", "../../packaging/openshift/monitoring.yaml", "../../packaging/secure-metrics/review.yaml"} {
		kubetest.Apply(t, admin, f)
	}
	ctx := kubetest.Ctx(t)
	for _, ns := range []string{"openshift-monitoring", "elsewhere"} {
		kubetest.Namespace(t, admin, ns)
	}
	for _, sa := range []struct{ ns, name string }{{"openshift-monitoring", "prometheus-k8s"}, {"elsewhere", "curious"}} {
		if _, err := admin.CoreV1().ServiceAccounts(sa.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fwd, err := kubernetes.NewForConfig(c.Config(kubetest.Token(t, admin, "iptables-alerter", "iptables-alerter-forward")))
	if err != nil {
		t.Fatal(err)
	}
	g := kubeauth.New(fwd)
	prom := kubetest.Token(t, admin, "openshift-monitoring", "prometheus-k8s")
	curious := kubetest.Token(t, admin, "elsewhere", "curious")
	cases := []struct {
		name, token, path string
		want              int
	}{
		{name: "platform prometheus", token: prom, path: "/metrics", want: http.StatusOK},
		{name: "platform prometheus, agent page", token: prom, path: "/metrics/agent", want: http.StatusOK},
		{name: "platform prometheus, other path", token: prom, path: "/debug/pprof", want: http.StatusForbidden},
		{name: "unbound service account", token: curious, path: "/metrics", want: http.StatusForbidden},
		{name: "forged token", token: prom[:len(prom)-4] + "AAAA", path: "/metrics", want: http.StatusUnauthorized},
		{name: "not a token", token: "hello", path: "/metrics", want: http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, err := g.Check(ctx, tc.token, "get", tc.path)
			if err != nil || code != tc.want {
				t.Fatalf("Check = %d, %v; want %d", code, err, tc.want)
			}
		})
	}

	// Without the review binding the forwarder cannot ask: an error, not
	// a verdict (the handler answers 503).
	if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, "iptables-alerter-forward-review", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's RBAC cache follows the delete shortly after.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, err := kubeauth.New(fwd).Check(ctx, prom, "get", "/metrics")
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("review without the binding gave %d, want an error", code)
		}
	}
}
