package packaging

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDashboardConfigMaps (issue 27 item 3): the dashboard ships as a
// ConfigMap holding a JSON file of packaging/monitoring, byte for byte:
// grafana-dashboard.json for Grafana's sidecar (label grafana_dashboard:
// "1", the agent's namespace) from the monitoring component and the chart,
// and its console copy, console/console-dashboard.json (TestConsoleDashboard),
// for the OpenShift console (openshift-config-managed, label
// console.openshift.io/dashboard: "true", no sidecar label) from the
// OpenShift overlays and the chart's OpenShift mode.
func TestDashboardConfigMaps(t *testing.T) {
	grafana, err := os.ReadFile(filepath.Join(repo(t), grafanaDashboard))
	if err != nil {
		t.Fatal(err)
	}
	console, err := os.ReadFile(filepath.Join(repo(t), consoleDashboard))
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
		{name: "kustomize openshift-user-workload", openshift: true, render: func(t *testing.T) []byte {
			return kustomize(t, filepath.Join(repo(t), "packaging/openshift-user-workload"))
		}},
		{name: "helm", render: func(t *testing.T) []byte { return helmTemplate(t) }},
		{name: "helm openshift", openshift: true, render: func(t *testing.T) []byte { return helmTemplate(t, withAPI("openshift.enabled=true")...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, label, other := "iptables-alerter", "grafana_dashboard", "console.openshift.io/dashboard"
			value, want, file := "1", grafana, grafanaDashboard
			if tc.openshift {
				ns, label, other, value = "openshift-config-managed", other, label, "true"
				want, file = console, consoleDashboard
			}
			objs := objects(t, tc.render(t))
			var found int
			for k, o := range objs {
				meta, _ := o["metadata"].(map[string]any)
				labels, _ := meta["labels"].(map[string]any)
				// A dashboard's: by its name or either label (the
				// user-workload overlay adds a ConfigMap of the service CA).
				if o["kind"] != "ConfigMap" || meta["name"] != "iptables-alerter-dashboard" && labels[label] == nil && labels[other] == nil {
					continue
				}
				found++
				if k != "ConfigMap/"+ns+"/iptables-alerter-dashboard" {
					t.Errorf("dashboard ConfigMap %s, want it in %s", k, ns)
				}
				if labels[label] != value || labels[other] != nil {
					t.Errorf("%s labels %v: want %s=%q and no %s", k, labels, label, value, other)
				}
				data, _ := o["data"].(map[string]any)
				if len(data) != 1 || data["iptables-alerter.json"] != string(want) {
					t.Errorf("%s: data is not %s under iptables-alerter.json", k, file)
				}
			}
			if found != 1 {
				t.Errorf("%d dashboard ConfigMaps rendered, want one", found)
			}
		})
	}
}
