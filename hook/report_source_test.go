//go:build !hookonly && !agentonly

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestReportCredentials is issue 16 item 3 on a real kube-apiserver:
// report finds credentials the kubectl way ($KUBECONFIG, ~/.kube/config,
// the current context, --context), -n keeps one namespace from the
// cluster (listed there: a namespace's Role is enough) and from a saved
// events file, and the header says which cluster, when and from what.
func TestReportCredentials(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	for _, ns := range []string{"shop", "ops"} {
		kubetest.Namespace(t, cs, ns)
		createPodEvent(t, cs, "usage-"+ns, events.Reason, "usage", events.Summary{
			Node: "node-a", Owner: owner.Owner{Kind: "Deployment", Name: "app-" + ns},
			Pod:   findings.Pod{Namespace: ns, Name: "app-" + ns + "-1", UID: "uid-" + ns},
			State: findings.StatePresent, Impact: findings.Impact{Xt: 1}, Worst: findings.ImpactXt,
		})
	}
	// A service account allowed to list Events in ops only.
	ctx := kubetest.Ctx(t)
	if _, err := cs.CoreV1().ServiceAccounts("ops").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles("ops").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings("ops").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: "ops"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// One kubeconfig, three contexts; the current one's token is wrong, so
	// a report that did not honour the current context or --context
	// would not tell.
	dir := t.TempDir()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthority: c.CAFile}
	for name, token := range map[string]string{"admin": c.AdminToken, "wrong": "not-a-token", "ops-reader": kubetest.Token(t, cs, "ops", "reader")} {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: name}
	}
	cfg.CurrentContext = "wrong"
	kc := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	cfg.CurrentContext = "admin"
	if err := os.MkdirAll(filepath.Join(home, ".kube"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*cfg, filepath.Join(home, ".kube", "config")); err != nil {
		t.Fatal(err)
	}
	saved := saveEvents(t, cs, dir)

	// The real binary: client-go reads $HOME once, when it starts.
	runBin := func(kubeconfig, home string, args ...string) (string, int, string) {
		cmd := exec.Command(bin, append([]string{"report"}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "KUBECONFIG=" + kubeconfig}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := cmd.ProcessState.ExitCode()
		if err != nil && code <= 0 {
			t.Fatalf("run report: %v", err)
		}
		return string(out), code, stderr.String()
	}
	for _, tc := range []struct {
		name, kubeconfig, home string
		args                   []string
		code                   int
		// groups are the namespaces reported; origin the header's fields;
		// the error's, when failing.
		groups, context, from string
	}{
		{"KUBECONFIG, current context", kc, dir, nil, 2, "", "", "Unauthorized"},
		{"KUBECONFIG, --context", kc, dir, []string{"--context", "admin"}, 0, "ops,shop", "admin", "events"},
		{"~/.kube/config", "", home, nil, 0, "ops,shop", "admin", "events"},
		{"--kubeconfig over KUBECONFIG", "/nonexistent", dir, []string{"--kubeconfig", kc, "--context", "admin"}, 0, "ops,shop", "admin", "events"},
		{"-n, namespace Role", kc, dir, []string{"--context", "ops-reader", "-n", "ops"}, 0, "ops", "ops-reader", "events"},
		{"all namespaces, namespace Role", kc, dir, []string{"--context", "ops-reader"}, 2, "", "", "forbidden"},
		{"--namespace, saved events", "", dir, []string{"--events", saved, "--namespace", "shop"}, 0, "shop", "", "events-file"},
		{"no credentials", "", dir, nil, 2, "", "", "not running in a pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, stderr := runBin(tc.kubeconfig, tc.home, append(tc.args, "--format", "json")...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, stderr)
			}
			if code != 0 {
				if !strings.Contains(stderr, tc.from) {
					t.Errorf("stderr lacks %q: %s", tc.from, stderr)
				}
				return
			}
			_, r := groupsOf(t, out)
			var nss []string
			for _, g := range r.Groups {
				nss = append(nss, g.Namespace)
			}
			o := r.Origin
			wantCluster := c.URL
			if tc.context == "" {
				wantCluster = ""
			}
			if strings.Join(nss, ",") != tc.groups || o.Context != tc.context || o.Cluster != wantCluster ||
				strings.Join(o.From, ",") != tc.from || o.Time.IsZero() {
				t.Errorf("groups %v, origin %+v; want %s, context %q, cluster %q, from %s", nss, o, tc.groups, tc.context, wantCluster, tc.from)
			}
		})
	}

	// The header leads every format but JSON's field and JUnit's
	// properties.
	want := "Report of cluster " + c.URL + " (context ops-reader), namespace ops, at "
	for _, f := range []string{"text", "markdown", "html", "junit"} {
		out, code, _ := runBin(kc, dir, "--context", "ops-reader", "-n", "ops", "--format", f)
		if f == "junit" {
			want = `<property name="report" value="` + want
		}
		if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, ", from events.") {
			t.Errorf("%s: exit %d, no header %q:\n%s", f, code, want, out)
		}
	}
}
