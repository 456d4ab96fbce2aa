package packaging

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDashboardConfigMaps (issue 27 item 3): the dashboard ships as a
// ConfigMap made from the one JSON file (packaging/monitoring), byte for
// byte: for Grafana's sidecar (label grafana_dashboard: "1", the agent's
// namespace) from the monitoring component and the chart, and for the
// OpenShift console (openshift-config-managed, label
// console.openshift.io/dashboard: "true", no sidecar label) from the
// OpenShift overlays and the chart's OpenShift mode.
func TestDashboardConfigMaps(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(repo(t), "packaging/monitoring/grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		render    func(t *testing.T) []byte
		openshift bool
	}{
		{name: "kustomize prometheus-operator", render: func(t *testing.T) []byte {
			return kustomize(t, filepath.Join(repo(t), "packaging/prometheus-operator"))
		}},
		{name: "kustomize openshift", openshift: true, render: func(t *testing.T) []byte { return kustomize(t, filepath.Join(repo(t), "packaging/openshift")) }},
		{name: "kustomize openshift-no-sidecar", openshift: true, render: func(t *testing.T) []byte {
			return kustomize(t, filepath.Join(repo(t), "packaging/openshift-no-sidecar"))
		}},
		{name: "helm", render: func(t *testing.T) []byte { return helmTemplate(t) }},
		{name: "helm openshift", openshift: true, render: func(t *testing.T) []byte { return helmTemplate(t, withAPI("openshift.enabled=true")...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, label, other := "iptables-alerter", "grafana_dashboard", "console.openshift.io/dashboard"
			value := "1"
			if tc.openshift {
				ns, label, other, value = "openshift-config-managed", other, label, "true"
			}
			objs := objects(t, tc.render(t))
			var found int
			for k, o := range objs {
				if o["kind"] != "ConfigMap" {
					continue
				}
				found++
				if k != "ConfigMap/"+ns+"/iptables-alerter-dashboard" {
					t.Errorf("dashboard ConfigMap %s, want it in %s", k, ns)
				}
				labels, _ := o["metadata"].(map[string]any)["labels"].(map[string]any)
				if labels[label] != value || labels[other] != nil {
					t.Errorf("%s labels %v: want %s=%q and no %s", k, labels, label, value, other)
				}
				data, _ := o["data"].(map[string]any)
				if len(data) != 1 || data["iptables-alerter.json"] != string(want) {
					t.Errorf("%s: data is not packaging/monitoring/grafana-dashboard.json under iptables-alerter.json", k)
				}
			}
			if found != 1 {
				t.Errorf("%d ConfigMaps rendered, want the dashboard's", found)
			}
		})
	}
}
