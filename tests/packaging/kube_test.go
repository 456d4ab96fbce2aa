package packaging

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// serviceMonitorCRD is the least of Prometheus Operator's CRD that accepts
// a ServiceMonitor: the test installs it from here, no network needed.
var serviceMonitorCRD = minimalCRD("monitoring.coreos.com", "Namespaced", "ServiceMonitor", "servicemonitors")

// minimalCRD: kubetest.MinimalCRD, shared with tests/release.
var minimalCRD = kubetest.MinimalCRD

// sccCRD stands in for OpenShift's SecurityContextConstraints, a built-in
// kind there and unknown to a plain kube-apiserver: cluster-scoped, its
// fields at the top level, kept as they are.
var sccCRD = minimalCRD("security.openshift.io", "Cluster", "SecurityContextConstraints", "securitycontextconstraints")

// kubectl runs the real kubectl against the test's API server.
func kubectl(t *testing.T, kubeconfig string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// contains reports where got lacks or differs from a field of want: the
// server adds defaults, and must keep every field we set.
func contains(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{path + ": not an object on the server"}
		}
		var diffs []string
		for k, v := range w {
			diffs = append(diffs, contains(path+"."+k, v, g[k])...)
		}
		return diffs
	case []any:
		if len(w) == 0 && got == nil {
			return nil // an empty list is stored as none (omitempty)
		}
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %d items set, server has %v", path, len(w), got)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, contains(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: set %v, server has %v", path, want, got)}
		}
		return nil
	}
}

// Every kustomization (the OpenShift ones with OpenShift's SCC kind from
// a stand-in CRD), and the base with the secure-metrics component, as
// `kubectl apply --server-side -k` applies them,
// against a real kube-apiserver; every object read back holds what we set.
func TestKustomizeServerSideApply(t *testing.T) {
	_, err := exec.LookPath("kubectl")
	nstest.Need(t, err == nil, "needs kubectl on PATH (tests/kube/build-kube.sh kubectl builds it into $IPTA_CACHE/kube/bin, which make puts first on PATH)")
	c := kubetest.Start(t)
	kc := c.Kubeconfig("admin", c.AdminToken)
	dir := t.TempDir()
	crd := filepath.Join(dir, "crds.yaml")
	if err := os.WriteFile(crd, []byte(serviceMonitorCRD+"---\n"+promRuleCRD+"---\n"+sccCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, kc, "apply", "--server-side", "-f", crd)
	kubectl(t, kc, "wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com",
		"crd/prometheusrules.monitoring.coreos.com", "crd/securitycontextconstraints.security.openshift.io")
	// Where OpenShift's console reads dashboards (the overlay's ConfigMap).
	kubectl(t, kc, "create", "namespace", "openshift-config-managed")

	for _, k := range []string{"packaging/kubernetes", "packaging/prometheus-operator", "packaging/openshift", "packaging/openshift-no-sidecar", "packaging/openshift-user-workload", "secure-metrics"} {
		t.Run(filepath.Base(k), func(t *testing.T) {
			path := filepath.Join(repo(t), k)
			if k == "secure-metrics" {
				// The base with the component, as an admin turns TLS on.
				path = secureOverlay(t)
			}
			rendered := kubectl(t, kc, "kustomize", path)
			kubectl(t, kc, "apply", "--server-side", "--field-manager=iptables-alerter-test", "-k", path)
			file := filepath.Join(dir, filepath.Base(k)+".yaml")
			if err := os.WriteFile(file, rendered, 0o644); err != nil {
				t.Fatal(err)
			}
			var list struct{ Items []map[string]any }
			if err := json.Unmarshal(kubectl(t, kc, "get", "-f", file, "-o", "json"), &list); err != nil {
				t.Fatalf("decode objects read back: %v", err)
			}
			docs := strings.Split("\n"+string(rendered), "\n---\n")
			if len(list.Items) != len(docs) || len(docs) < 9 {
				t.Fatalf("read back %d objects of %d rendered", len(list.Items), len(docs))
			}
			kinds := map[string]bool{}
			for i, doc := range docs {
				var want map[string]any
				if err := yaml.Unmarshal([]byte(doc), &want); err != nil {
					t.Fatalf("parse rendered object: %v", err)
				}
				kind := want["kind"].(string)
				kinds[kind] = true
				if strings.HasPrefix(kind, "ValidatingAdmissionPolicy") {
					// kustomize's namespace transformer does not know these
					// kinds are cluster-scoped; the API server drops it.
					delete(want["metadata"].(map[string]any), "namespace")
				}
				for _, d := range contains(kind, want, list.Items[i]) {
					t.Errorf("%s", d)
				}
			}
			want := []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "DaemonSet", "Service", "NetworkPolicy"}
			if k != "packaging/kubernetes" {
				want = append(want, "ServiceMonitor", "PrometheusRule", "ConfigMap")
			} else if kinds["ServiceMonitor"] || kinds["PrometheusRule"] {
				t.Errorf("the base has Prometheus Operator kinds: it fails on a cluster without them")
			}
			if strings.Contains(k, "openshift") {
				want = append(want, "SecurityContextConstraints")
			}
			for _, w := range want {
				if !kinds[w] {
					t.Errorf("no %s in %s", w, k)
				}
			}
		})
	}
}

// A cluster without the Prometheus Operator (no monitoring.coreos.com
// CRDs): `kubectl apply -k packaging/kubernetes` and `kubectl delete -k`
// of it both exit 0, as an admin runs them (client-side apply), and the
// delete leaves nothing; the same for the chart's `helm install` and
// `helm uninstall`. The namespace controller runs, so the Namespace's
// deletion finishes as on a cluster.
func TestInstallWithoutPrometheusOperator(t *testing.T) {
	_, err := exec.LookPath("kubectl")
	nstest.Need(t, err == nil, "needs kubectl on PATH (tests/kube/build-kube.sh kubectl)")
	c := kubetest.Start(t)
	c.ControllerManager(t, "namespace")
	kc := c.Kubeconfig("admin", c.AdminToken)
	if out := kubectl(t, kc, "get", "crd", "-o", "name"); len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("CRDs served: %s", out)
	}
	gone := func(what string, args ...string) {
		t.Helper()
		out := kubectl(t, kc, append([]string{"get", "--ignore-not-found", "-o", "name"}, args...)...)
		if len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("after %s: still there: %s", what, out)
		}
	}

	t.Run("kustomize", func(t *testing.T) {
		base := filepath.Join(repo(t), "packaging/kubernetes")
		kubectl(t, kc, "apply", "-k", base)
		kubectl(t, kc, "-n", "iptables-alerter", "get", "daemonset/iptables-alerter", "service/iptables-alerter-metrics")
		kubectl(t, kc, "delete", "-k", base, "--timeout=3m")
		gone("kubectl delete -k", "namespace/iptables-alerter", "clusterrole/iptables-alerter-forward", "priorityclass/iptables-alerter")
	})

	t.Run("helm", func(t *testing.T) {
		kubectl(t, kc, "create", "namespace", "iptables-alerter")
		kubectl(t, kc, "label", "namespace", "iptables-alerter", "pod-security.kubernetes.io/enforce=privileged")
		for _, args := range [][]string{
			{"install", "iptables-alerter", chartDir(t)},
			{"uninstall", "iptables-alerter", "--wait"},
		} {
			out, err := helm(t, append(args, "--kubeconfig", kc, "--namespace", "iptables-alerter")...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			// The notes say why there is no ServiceMonitor.
			if args[0] == "install" && !strings.Contains(string(out), "No ServiceMonitor or PrometheusRule") {
				t.Errorf("helm install printed nothing on the monitoring objects it left out:\n%s", out)
			}
		}
		gone("helm uninstall", "-n", "iptables-alerter", "daemonset/iptables-alerter", "configmap/iptables-alerter-dashboard")
		gone("helm uninstall", "clusterrole/iptables-alerter-forward", "priorityclass/iptables-alerter")
	})
}
