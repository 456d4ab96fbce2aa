package packaging

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// chartKubeVersion is the Kubernetes version the chart is rendered for
// offline: helm template assumes 1.20 otherwise, below the chart's
// kubeVersion (sidecar containers need 1.29). The test API server's.
const chartKubeVersion = "1.35.4"

// helmLabels are the labels the chart adds to what the kustomize tree sets:
// the comparison drops them from both. The chart puts Helm's recommended
// set on every object, the kustomize tree its name label on some; the
// selectors and the pod template's name label are compared.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/name"}

func chartDir(t testing.TB) string {
	return filepath.Join(repo(t), "packaging", "helm", "iptables-alerter")
}

// helm runs the pinned helm (tests/kube/build-helm.sh) with its
// configuration, cache and data in a temp dir, never the user's.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	_, err := exec.LookPath("helm")
	nstest.Need(t, err == nil, "needs helm on PATH (tests/kube/build-helm.sh builds it into $IPTA_CACHE/kube/bin, which make puts first on PATH)")
	cmd := exec.Command("helm", args...)
	cmd.Env = helmEnv(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// helmEnv is the environment with helm's configuration, cache and data
// directories in a temp dir.
func helmEnv(t *testing.T) []string {
	home := t.TempDir()
	return append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache", "HELM_DATA_HOME="+home+"/data")
}

// helmTemplate is `helm template` of the chart in namespace iptables-alerter
// with the --set values given.
func helmTemplate(t *testing.T, set ...string) []byte {
	t.Helper()
	out, err := helmTemplateErr(t, set...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func helmTemplateErr(t *testing.T, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "iptables-alerter", chartDir(t), "--namespace", "iptables-alerter", "--kube-version", chartKubeVersion}
	for _, s := range set {
		if strings.HasPrefix(s, "--") {
			args = append(args, s) // a flag, e.g. monitoringAPI's
			continue
		}
		args = append(args, "--set", s)
	}
	return helm(t, args...)
}

// monitoringAPI are the flags that make helm template render as for an
// API server serving the Prometheus Operator's kinds (Capabilities).
var monitoringAPI = []string{"--api-versions=monitoring.coreos.com/v1/ServiceMonitor", "--api-versions=monitoring.coreos.com/v1/PrometheusRule"}

// withAPI is set with monitoringAPI's flags.
func withAPI(set ...string) []string { return append(slices.Clone(monitoringAPI), set...) }

// kustomize is `kubectl kustomize` of a directory (no API server needed).
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	_, err := exec.LookPath("kubectl")
	nstest.Need(t, err == nil, "needs kubectl on PATH (tests/kube/build-kube.sh kubectl)")
	out, err := exec.Command("kubectl", "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return out
}

// objectKey is kind/namespace/name, the namespace empty for cluster objects.
func objectKey(o map[string]any) string {
	meta, _ := o["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	return fmt.Sprintf("%v/%s/%v", o["kind"], ns, meta["name"])
}

// objects parses a multi-document YAML stream, keyed kind/namespace/name.
func objects(t *testing.T, data []byte) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	for _, doc := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		var o map[string]any
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("parse rendered object: %v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		key := objectKey(o)
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		objs[key] = o
	}
	return objs
}

// fileObject is one object of a file in the repo, in namespace ns when
// given (as the chart places it).
func fileObject(t *testing.T, rel, ns string) (string, map[string]any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, data)
	if len(objs) != 1 {
		t.Fatalf("%s: %d objects, want 1", rel, len(objs))
	}
	for _, o := range objs {
		if ns != "" {
			o["metadata"].(map[string]any)["namespace"] = ns
		}
		return objectKey(o), o
	}
	panic("unreachable")
}

// normalise drops what the chart adds by design (Helm's labels, the CRD's
// keep policy) and the image's tag and digest (the base names a tag its
// kustomization sets; the chart's is appVersion), and puts the pod's set-like
// lists in one order: the rest must be equal.
func normalise(o map[string]any) {
	dropLabels := func(meta map[string]any, drop []string) {
		labels, _ := meta["labels"].(map[string]any)
		for _, l := range drop {
			delete(labels, l)
		}
		if labels != nil && len(labels) == 0 {
			delete(meta, "labels")
		}
	}
	meta := o["metadata"].(map[string]any)
	dropLabels(meta, helmLabels)
	if ann, ok := meta["annotations"].(map[string]any); ok && o["kind"] == "CustomResourceDefinition" {
		delete(ann, "helm.sh/resource-policy")
	}
	if o["kind"] != "DaemonSet" {
		return
	}
	tmpl := o["spec"].(map[string]any)["template"].(map[string]any)
	dropLabels(tmpl["metadata"].(map[string]any), []string{"app.kubernetes.io/instance"})
	spec := tmpl["spec"].(map[string]any)
	for _, list := range []string{"initContainers", "containers"} {
		cs, _ := spec[list].([]any)
		if len(cs) == 0 {
			delete(spec, list) // an overlay's empty list is none
		}
		for _, c := range cs {
			c := c.(map[string]any)
			c["image"] = imageRepository(c["image"].(string))
			if ps, ok := c["ports"].([]any); ok && len(ps) == 0 {
				delete(c, "ports") // a merge that deleted every port leaves []
			}
			sortBy(c, "ports", "name")
			sortBy(c, "volumeMounts", "mountPath")
			sortBy(c, "env", "name")
		}
	}
	sortBy(spec, "volumes", "name")
}

// sortBy orders the list obj[list] by each item's field key: lists that
// are sets keyed by that field in Kubernetes' own merge (ports, mounts,
// env, volumes), whose order kustomize's strategic merge changes and the
// kubelet ignores. Container and argument lists keep their order.
func sortBy(obj map[string]any, list, key string) {
	items, _ := obj[list].([]any)
	sort.SliceStable(items, func(i, j int) bool {
		return fmt.Sprint(items[i].(map[string]any)[key]) < fmt.Sprint(items[j].(map[string]any)[key])
	})
}

// imageRepository is an image reference without its tag and digest.
func imageRepository(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// The chart renders the objects of the kustomization of the same setup,
// plus the Report CRD of packaging/crds: with defaults on an API server
// without the Prometheus Operator's kinds, the kustomize base and the
// dashboard's ConfigMap; where they are served, with
// values-kube-prometheus-stack.yaml, packaging/prometheus-operator; with
// openshift.enabled the OpenShift overlay's; with metrics.secure.enabled
// the base with the monitoring and secure-metrics components. Each object
// compared whole, after dropping Helm's own labels.
func TestHelmMatchesKustomize(t *testing.T) {
	kps := filepath.Join(repo(t), "packaging/helm/values-kube-prometheus-stack.yaml")
	for _, tc := range []struct {
		name string
		// kustomize is the directory under the repo, or "secure-metrics",
		// or "no-hook" (the base with that component).
		kustomize string
		set       []string
		// dashboard: the chart's dashboard ConfigMap is expected beside
		// what the kustomization renders (its is in the monitoring component).
		dashboard bool
	}{
		{name: "kubernetes", kustomize: "packaging/kubernetes", set: []string{"namespace.create=true"}, dashboard: true},
		{name: "prometheus-operator", kustomize: "packaging/prometheus-operator", set: withAPI("namespace.create=true", "--values="+kps, "networkPolicy.monitoringNamespaces=null")},
		{name: "openshift", kustomize: "packaging/openshift", set: withAPI("namespace.create=true", "openshift.enabled=true")},
		// The MachineConfig route: the hook from boot, no installer sidecar.
		{name: "openshift-no-sidecar", kustomize: "packaging/openshift-no-sidecar", set: withAPI("namespace.create=true", "openshift.enabled=true", "hook.enabled=false")},
		// A containerd-only cluster with a read-only /usr: no sidecar.
		{name: "kubernetes-no-hook", kustomize: "no-hook", set: []string{"namespace.create=true", "hook.enabled=false"}, dashboard: true},
		{name: "secure-metrics", kustomize: "secure-metrics", set: withAPI("namespace.create=true", "metrics.secure.enabled=true")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(repo(t), tc.kustomize)
			switch tc.kustomize {
			case "secure-metrics":
				dir = secureOverlay(t)
			case "no-hook":
				dir = ownOverlay(t, "", "packaging/kubernetes", "packaging/kubernetes/components/no-hook")
			}
			want := objects(t, kustomize(t, dir))
			if tc.dashboard {
				k := "ConfigMap/iptables-alerter/iptables-alerter-dashboard"
				want[k] = objects(t, kustomize(t, filepath.Join(repo(t), "packaging/prometheus-operator")))[k]
			}
			for _, f := range []string{"openreports.io_reports.yaml", "openreports.io_clusterreports.yaml"} {
				k, crd := fileObject(t, "packaging/crds/"+f, "")
				want[k] = crd
			}
			got := objects(t, helmTemplate(t, tc.set...))
			for _, o := range want {
				normalise(o)
			}
			for _, o := range got {
				normalise(o)
			}
			if diff := cmp.Diff(keys(want), keys(got)); diff != "" {
				t.Errorf("objects (-kustomize +chart):\n%s", diff)
			}
			for k, w := range want {
				if g, ok := got[k]; ok {
					if diff := cmp.Diff(w, g); diff != "" {
						t.Errorf("%s (-kustomize +chart):\n%s", k, diff)
					}
				}
			}
		})
	}
}

func keys(m map[string]map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestHelmServiceMonitorTargets: as TestServiceMonitorNode for the chart's
// ServiceMonitor in each setup, including those no kustomization has (no
// agent, no forwarder).
func TestHelmServiceMonitorTargets(t *testing.T) {
	for name, set := range map[string][]string{
		"plain":                  withAPI(),
		"secure":                 withAPI("metrics.secure.enabled=true"),
		"openshift":              withAPI("openshift.enabled=true"),
		"secure without agent":   withAPI("metrics.secure.enabled=true", "agent.enabled=false"),
		"no forward":             withAPI("forward.enabled=false"),
		"secure with relabeling": withAPI("metrics.secure.enabled=true", "metrics.serviceMonitor.relabelings[0].targetLabel=cluster", "metrics.serviceMonitor.relabelings[0].replacement=east"),
	} {
		t.Run(name, func(t *testing.T) {
			var sm struct {
				Spec struct{ Endpoints []smEndpoint }
			}
			b, _ := json.Marshal(objects(t, helmTemplate(t, set...))["ServiceMonitor/iptables-alerter/iptables-alerter"])
			if err := json.Unmarshal(b, &sm); err != nil || len(sm.Spec.Endpoints) == 0 {
				t.Fatalf("no ServiceMonitor endpoints (%v): %s", err, b)
			}
			checkEndpoints(t, sm.Spec.Endpoints)
		})
	}
}

// TestHelmRuleNamespace: the alert of no agent target at all has no
// target's labels to take the namespace from; the chart's names its
// release's namespace, where the others' targets are, so a route on it
// gets the worst outage too.
func TestHelmRuleNamespace(t *testing.T) {
	for _, ns := range []string{"iptables-alerter", "monitoring-alerts"} {
		objs := objects(t, helmTemplate(t, withAPI("--namespace="+ns)...))
		var rule struct {
			Spec struct {
				Groups []struct {
					Rules []struct{ Alert, Expr string }
				}
			}
		}
		b, _ := json.Marshal(objs["PrometheusRule/"+ns+"/iptables-alerter"])
		if err := json.Unmarshal(b, &rule); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, g := range rule.Spec.Groups {
			for _, r := range g.Rules {
				if r.Alert == "IPTablesAlerterAgentDown" {
					found = true
					if want := `absent(up{job="iptables-alerter-metrics"}), "namespace", "` + ns + `"`; !strings.Contains(r.Expr, want) {
						t.Errorf("release in %s: IPTablesAlerterAgentDown's expr lacks %s:\n%s", ns, want, r.Expr)
					}
				}
			}
		}
		if !found {
			t.Errorf("release in %s: no IPTablesAlerterAgentDown in the PrometheusRule", ns)
		}
	}
}

// The chart's copies of the CRD and the alerts (a chart cannot read outside
// its directory) are the files packaging ships, byte for byte.
func TestHelmFilesInSync(t *testing.T) {
	for src, dst := range map[string]string{
		"packaging/crds/openreports.io_reports.yaml":          "openreports.io_reports.yaml",
		"packaging/crds/openreports.io_clusterreports.yaml":   "openreports.io_clusterreports.yaml",
		"packaging/monitoring/prometheusrule.yaml":            "prometheusrule.yaml",
		"packaging/monitoring/grafana-dashboard.json":         "grafana-dashboard.json",
		"packaging/monitoring/console/console-dashboard.json": "console-dashboard.json",
	} {
		want, err := os.ReadFile(filepath.Join(repo(t), src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir(t), "files", dst))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("packaging/helm/iptables-alerter/files/%s differs from %s: run make chart-files", dst, src)
		}
	}
}

// helm lint --strict passes in each mode.
func TestHelmLint(t *testing.T) {
	for _, set := range [][]string{nil, {"openshift.enabled=true"}, {"metrics.secure.enabled=true", "namespace.create=true"}} {
		args := []string{"lint", "--strict", "--kube-version", chartKubeVersion, chartDir(t)}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

func daemonSetPod(t *testing.T, objs map[string]map[string]any) corev1.PodSpec {
	t.Helper()
	var ds appsv1.DaemonSet
	if !decoded(t, objs, "DaemonSet/iptables-alerter/iptables-alerter", &ds) {
		t.Fatalf("no DaemonSet rendered")
	}
	return ds.Spec.Template.Spec
}

// decoded decodes the object objs holds at key (kind/namespace/name) into
// obj, a typed API object, and tells whether there is one.
func decoded(t *testing.T, objs map[string]map[string]any, key string, obj any) bool {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		return false
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, obj); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return true
}

func names(cs []corev1.Container) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

// Each values toggle renders a consistent subset: the containers asked
// for, the volumes they mount and no other, the RBAC, ports and scrape
// endpoints of the parts that run.
func TestHelmValues(t *testing.T) {
	for _, tc := range []struct {
		name        string
		set         []string
		init, conts string
		// present and absent are object keys.
		present, absent []string
		// svcPorts are the Service's port names ("" when there is none).
		svcPorts string
		check    func(t *testing.T, p corev1.PodSpec, objs map[string]map[string]any)
	}{
		{
			// An API server without the Prometheus Operator's kinds: none
			// of its objects, so install and uninstall succeed.
			name: "defaults", init: "hook", conts: "agent,forward", svcPorts: "metrics,forward-metrics",
			present: []string{"ClusterRoleBinding//iptables-alerter-forward", "CustomResourceDefinition//reports.openreports.io", "ConfigMap/iptables-alerter/iptables-alerter-dashboard"},
			absent:  []string{"Namespace//iptables-alerter", "ClusterRoleBinding//iptables-alerter-forward-review", "ClusterRoleBinding//iptables-alerter-metrics-reader", "PrometheusRule/iptables-alerter/iptables-alerter", "ServiceMonitor/iptables-alerter/iptables-alerter"},
			check: func(t *testing.T, p corev1.PodSpec, _ map[string]map[string]any) {
				if got := p.NodeSelector["kubernetes.io/os"]; got != "linux" {
					t.Errorf("nodeSelector kubernetes.io/os = %q, want linux", got)
				}
				for _, c := range append(p.InitContainers, p.Containers...) {
					if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
						t.Errorf("%s: image %q is not by version tag", c.Name, c.Image)
					}
				}
			},
		},
		{
			name: "agent only", set: []string{"forward.enabled=false", "hook.enabled=false"}, conts: "agent", svcPorts: "metrics",
			absent: []string{"ClusterRole//iptables-alerter-forward", "ClusterRoleBinding//iptables-alerter-forward"},
			check: func(t *testing.T, _ corev1.PodSpec, objs map[string]map[string]any) {
				np := objs["NetworkPolicy/iptables-alerter/iptables-alerter"]["spec"].(map[string]any)
				if _, ok := np["egress"]; ok {
					t.Errorf("NetworkPolicy admits egress without the forwarder: %v", np["egress"])
				}
			},
		},
		{
			name: "monitoring API served", set: withAPI(), init: "hook", conts: "agent,forward", svcPorts: "metrics,forward-metrics",
			present: []string{"PrometheusRule/iptables-alerter/iptables-alerter", "ServiceMonitor/iptables-alerter/iptables-alerter"},
		},
		{
			name: "monitoring API forced", set: []string{"metrics.forceMonitoringAPI=true"}, init: "hook", conts: "agent,forward", svcPorts: "metrics,forward-metrics",
			present: []string{"PrometheusRule/iptables-alerter/iptables-alerter", "ServiceMonitor/iptables-alerter/iptables-alerter"},
		},
		{
			// As prometheus-node-exporter's chart: labels for the
			// operator's selectors, the user's relabelings after ours,
			// metric relabelings, the pods' labels and annotations.
			name: "monitoring and pod values", init: "hook", conts: "agent,forward", svcPorts: "metrics,forward-metrics",
			set: withAPI("metrics.serviceMonitor.additionalLabels.release=kps", "metrics.prometheusRule.additionalLabels.release=kps",
				"metrics.serviceMonitor.relabelings[0].targetLabel=cluster", "metrics.serviceMonitor.relabelings[0].replacement=east",
				"metrics.serviceMonitor.metricRelabelings[0].action=drop", "metrics.serviceMonitor.metricRelabelings[0].sourceLabels[0]=__name__",
				"metrics.serviceMonitor.metricRelabelings[0].regex=go_.*",
				"podLabels.team=net", "podAnnotations.example\\.com/owner=net", "podLabels.app\\.kubernetes\\.io/name=other"),
			check: func(t *testing.T, p corev1.PodSpec, objs map[string]map[string]any) {
				for _, k := range []string{"ServiceMonitor/iptables-alerter/iptables-alerter", "PrometheusRule/iptables-alerter/iptables-alerter"} {
					labels := objs[k]["metadata"].(map[string]any)["labels"].(map[string]any)
					if labels["release"] != "kps" || labels["app.kubernetes.io/name"] != "iptables-alerter" {
						t.Errorf("%s labels %v, want release: kps beside the chart's", k, labels)
					}
				}
				var sm struct {
					Spec struct {
						Endpoints []struct {
							Relabelings, MetricRelabelings []map[string]any
						}
					}
				}
				b, _ := json.Marshal(objs["ServiceMonitor/iptables-alerter/iptables-alerter"])
				if err := json.Unmarshal(b, &sm); err != nil {
					t.Fatal(err)
				}
				for _, e := range sm.Spec.Endpoints {
					if len(e.Relabelings) != 3 || e.Relabelings[0]["targetLabel"] != "node" || e.Relabelings[1]["targetLabel"] != "component" || e.Relabelings[2]["targetLabel"] != "cluster" ||
						len(e.MetricRelabelings) != 1 || e.MetricRelabelings[0]["regex"] != "go_.*" {
						t.Errorf("endpoint relabelings %v, metricRelabelings %v", e.Relabelings, e.MetricRelabelings)
					}
				}
				ds := objs["DaemonSet/iptables-alerter/iptables-alerter"]["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
				labels, ann := ds["labels"].(map[string]any), ds["annotations"].(map[string]any)
				if labels["team"] != "net" || labels["app.kubernetes.io/name"] != "iptables-alerter" || ann["example.com/owner"] != "net" {
					t.Errorf("pod labels %v, annotations %v: want the values' beside the selector's, which stays", labels, ann)
				}
			},
		},
		{name: "no forward", set: []string{"forward.enabled=false"}, init: "hook", conts: "agent", svcPorts: "metrics"},
		{name: "forward only", set: []string{"agent.enabled=false", "hook.enabled=false"}, conts: "forward", svcPorts: "forward-metrics"},
		{name: "no hook", set: []string{"hook.enabled=false"}, conts: "agent,forward", svcPorts: "metrics,forward-metrics"},
		{
			name: "no monitoring", set: []string{"metrics.serviceMonitor.enabled=false", "metrics.prometheusRule.enabled=false", "networkPolicy.enabled=false", "reports.installCRD=false", "priorityClass.create=false"},
			init: "hook", conts: "agent,forward", svcPorts: "metrics,forward-metrics",
			absent: []string{"ServiceMonitor/iptables-alerter/iptables-alerter", "PrometheusRule/iptables-alerter/iptables-alerter", "NetworkPolicy/iptables-alerter/iptables-alerter", "CustomResourceDefinition//reports.openreports.io", "PriorityClass//iptables-alerter"},
		},
		{
			name: "secure without agent", set: withAPI("metrics.secure.enabled=true", "agent.enabled=false", "metrics.secure.readers[0].name=prometheus", "metrics.secure.readers[0].namespace=monitoring"),
			init: "hook", conts: "forward", svcPorts: "https-metrics",
			present: []string{"ClusterRoleBinding//iptables-alerter-forward-review", "ClusterRoleBinding//iptables-alerter-metrics-reader"},
			check: func(t *testing.T, p corev1.PodSpec, objs map[string]map[string]any) {
				if _, ok := argValue(p.Containers[0].Args, "agent-metrics"); ok {
					t.Errorf("forwarder proxies the agent's metrics with no agent: %v", p.Containers[0].Args)
				}
				eps := objs["ServiceMonitor/iptables-alerter/iptables-alerter"]["spec"].(map[string]any)["endpoints"].([]any)
				if len(eps) != 1 || eps[0].(map[string]any)["path"] != "/metrics" {
					t.Errorf("ServiceMonitor endpoints %v, want the forwarder's /metrics only", eps)
				}
			},
		},
		{
			name: "placement and image", set: []string{"image.tag=1.2.3", "image.digest=sha256:" + strings.Repeat("ab", 32), "nodeSelector.pool=infra", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists", "agent.resources.limits.memory=256Mi", "hook.hooksDir=/etc/containers/oci/hooks.d"},
			init: "hook", conts: "agent,forward", svcPorts: "metrics,forward-metrics",
			check: func(t *testing.T, p corev1.PodSpec, _ map[string]map[string]any) {
				want := "ghcr.io/iptables-alerter/iptables-alerter:1.2.3@sha256:" + strings.Repeat("ab", 32)
				if p.Containers[0].Image != want {
					t.Errorf("image %q, want %q", p.Containers[0].Image, want)
				}
				if p.NodeSelector["pool"] != "infra" || p.NodeSelector["kubernetes.io/os"] != "linux" {
					t.Errorf("nodeSelector %v", p.NodeSelector)
				}
				if len(p.Tolerations) != 1 || p.Tolerations[0].Key != "dedicated" {
					t.Errorf("tolerations %v", p.Tolerations)
				}
				if got := p.Containers[0].Resources.Limits.Memory().String(); got != "256Mi" {
					t.Errorf("agent memory limit %v", got)
				}
				// The installer's directory, its mount and the host path agree.
				hook := p.InitContainers[0]
				if len(hook.Env) != 1 || hook.Env[0].Value != "/etc/containers/oci/hooks.d" {
					t.Errorf("hook env %v, want HOOKS_DIR=/etc/containers/oci/hooks.d", hook.Env)
				}
				for _, m := range hook.VolumeMounts {
					if m.Name == "hooks-dir" && m.MountPath != "/host/etc/containers/oci/hooks.d" {
						t.Errorf("hooks-dir mounted at %s", m.MountPath)
					}
				}
				for _, v := range p.Volumes {
					if v.Name == "hooks-dir" && v.HostPath.Path != "/etc/containers/oci/hooks.d" {
						t.Errorf("hooks-dir volume is the host's %s", v.HostPath.Path)
					}
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(t, helmTemplate(t, tc.set...))
			p := daemonSetPod(t, objs)
			if got := names(p.InitContainers); got != tc.init {
				t.Errorf("init containers %q, want %q", got, tc.init)
			}
			if got := names(p.Containers); got != tc.conts {
				t.Errorf("containers %q, want %q", got, tc.conts)
			}
			// Every mount has its volume, and every volume is mounted.
			mounted := map[string]bool{}
			for _, c := range append(p.InitContainers, p.Containers...) {
				for _, m := range c.VolumeMounts {
					mounted[m.Name] = true
				}
			}
			for _, v := range p.Volumes {
				if !mounted[v.Name] {
					t.Errorf("volume %s is mounted by no container", v.Name)
				}
				delete(mounted, v.Name)
			}
			for m := range mounted {
				t.Errorf("mount %s has no volume", m)
			}
			var ports []string
			if svc, ok := objs["Service/iptables-alerter/iptables-alerter-metrics"]; ok {
				for _, p := range svc["spec"].(map[string]any)["ports"].([]any) {
					ports = append(ports, p.(map[string]any)["name"].(string))
				}
			}
			if got := strings.Join(ports, ","); got != tc.svcPorts {
				t.Errorf("Service ports %q, want %q", got, tc.svcPorts)
			}
			for _, k := range tc.present {
				if _, ok := objs[k]; !ok {
					t.Errorf("no %s", k)
				}
			}
			for _, k := range tc.absent {
				if _, ok := objs[k]; ok {
					t.Errorf("%s rendered", k)
				}
			}
			if tc.check != nil {
				tc.check(t, p, objs)
			}
		})
	}
}

// metrics.dashboard's labels and annotations go on the Grafana copy's
// ConfigMap, for a Grafana sidecar set to its own label or to a folder
// annotation (kube-prometheus-stack's grafana.sidecar.dashboards.label,
// labelValue, folderAnnotation): beside the chart's labels, which they
// never replace, and over grafana_dashboard's "1". Not on the console's
// copy, which the console selects by its own label.
func TestHelmDashboardValues(t *testing.T) {
	values := []string{"--set-string=metrics.dashboard.additionalLabels.team_dashboards=1", "metrics.dashboard.annotations.grafana_folder=Network",
		"metrics.dashboard.additionalLabels.app\\.kubernetes\\.io/name=other"}
	for _, tc := range []struct {
		name        string
		set         []string
		key         string
		labels, ann map[string]string
	}{
		{
			name: "defaults", key: "ConfigMap/iptables-alerter/iptables-alerter-dashboard",
			labels: map[string]string{"app.kubernetes.io/name": "iptables-alerter", "grafana_dashboard": "1"},
		},
		{
			name: "grafana", set: values, key: "ConfigMap/iptables-alerter/iptables-alerter-dashboard",
			labels: map[string]string{"app.kubernetes.io/name": "iptables-alerter", "grafana_dashboard": "1", "team_dashboards": "1"},
			ann:    map[string]string{"grafana_folder": "Network"},
		},
		{
			name: "grafana_dashboard's value", set: []string{"metrics.dashboard.additionalLabels.grafana_dashboard=yes"}, key: "ConfigMap/iptables-alerter/iptables-alerter-dashboard",
			labels: map[string]string{"app.kubernetes.io/name": "iptables-alerter", "grafana_dashboard": "yes"},
		},
		{
			name: "openshift", set: append([]string{"openshift.enabled=true"}, values...), key: "ConfigMap/openshift-config-managed/iptables-alerter-dashboard",
			labels: map[string]string{"app.kubernetes.io/name": "iptables-alerter", "console.openshift.io/dashboard": "true"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cm corev1.ConfigMap
			if !decoded(t, objects(t, helmTemplate(t, tc.set...)), tc.key, &cm) {
				t.Fatalf("no %s", tc.key)
			}
			labels := map[string]string{}
			for k, v := range cm.Labels {
				if !slices.Contains(helmLabels, k) || k == "app.kubernetes.io/name" {
					labels[k] = v
				}
			}
			if d := cmp.Diff(tc.labels, labels); d != "" {
				t.Errorf("labels (-want +got, Helm's aside):\n%s", d)
			}
			if d := cmp.Diff(tc.ann, cm.Annotations); d != "" {
				t.Errorf("annotations (-want +got):\n%s", d)
			}
		})
	}
}

// Values the chart refuses, each with an error that names the value: a
// misspelt or mistyped value is an error, never silently ignored.
func TestHelmRefuses(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"image.tag=latest"}, "image.tag: latest is refused"},
		{[]string{"agent.enabled=false", "forward.enabled=false"}, "enable at least one"},
		{[]string{"forward.enabled=false", "metrics.secure.enabled=true"}, "need forward.enabled"},
		{[]string{"forward.enabled=false", "openshift.enabled=true"}, "need forward.enabled"},
		// values.schema.json: a misspelt key, a wrong type, a digest that is not one.
		{[]string{"openshfit.enabled=true"}, "additional properties 'openshfit' not allowed"},
		{[]string{"agent.enabled=yes"}, "/agent/enabled"},
		{[]string{"image.digest=latest"}, "/image/digest"},
	} {
		_, err := helmTemplateErr(t, tc.set...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %v: error %v, want one saying %q", tc.set, err, tc.want)
		}
	}
}

// The chart refuses a cluster older than 1.29: there an init container's
// restartPolicy is dropped, and the installer, which waits for SIGTERM,
// would hold every pod in Init for ever.
func TestHelmNeedsSidecars(t *testing.T) {
	_, err := helm(t, "template", "x", chartDir(t), "--kube-version", "1.28.9")
	if err == nil || !strings.Contains(err.Error(), "chart requires kubeVersion: >=1.29.0-0") {
		t.Errorf("helm template --kube-version 1.28.9: error %v, want the chart's kubeVersion", err)
	}
}

// promRuleCRD accepts the chart's PrometheusRule, as serviceMonitorCRD its
// ServiceMonitor.
var promRuleCRD = minimalCRD("monitoring.coreos.com", "Namespaced", "PrometheusRule", "prometheusrules")

// operatorCRDs installs the CRDs of the chart's Prometheus Operator objects
// and OpenShift's SCC, and waits until they are served.
func operatorCRDs(t *testing.T, kc string) {
	t.Helper()
	crds := filepath.Join(t.TempDir(), "crds.yaml")
	if err := os.WriteFile(crds, []byte(serviceMonitorCRD+"---\n"+promRuleCRD+"---\n"+sccCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, kc, "apply", "--server-side", "-f", crds)
	kubectl(t, kc, "wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com",
		"crd/prometheusrules.monitoring.coreos.com", "crd/securitycontextconstraints.security.openshift.io")
}

// The chart's output, server-side applied to a real kube-apiserver with
// Prometheus Operator's CRDs installed first: the default render, then the
// OpenShift one over it, as an upgrade would; every object read back holds
// what the chart set.
func TestHelmServerSideApply(t *testing.T) {
	_, err := exec.LookPath("kubectl")
	nstest.Need(t, err == nil, "needs kubectl on PATH (tests/kube/build-kube.sh kubectl)")
	// Rendered first: a missing helm skips before the API server starts.
	renders := map[string][]byte{
		"default":   helmTemplate(t, withAPI("namespace.create=true")...),
		"openshift": helmTemplate(t, withAPI("namespace.create=true", "openshift.enabled=true")...),
	}
	c := kubetest.Start(t)
	kc := c.Kubeconfig("admin", c.AdminToken)
	operatorCRDs(t, kc)
	kubectl(t, kc, "create", "namespace", "openshift-config-managed")
	dir := t.TempDir()

	// In order: the OpenShift render is applied over the default one.
	for _, name := range []string{"default", "openshift"} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(file, renders[name], 0o644); err != nil {
				t.Fatal(err)
			}
			kubectl(t, kc, "apply", "--server-side", "--field-manager=helm-test", "-f", file)
			var list struct{ Items []map[string]any }
			if err := json.Unmarshal(kubectl(t, kc, "get", "-f", file, "-o", "json"), &list); err != nil {
				t.Fatalf("decode objects read back: %v", err)
			}
			var docs []map[string]any
			for _, doc := range bytes.Split(append([]byte("\n"), renders[name]...), []byte("\n---")) {
				var o map[string]any
				if err := yaml.Unmarshal(doc, &o); err != nil {
					t.Fatal(err)
				}
				if o != nil {
					docs = append(docs, o)
				}
			}
			if len(list.Items) != len(docs) {
				t.Fatalf("read back %d objects of %d rendered", len(list.Items), len(docs))
			}
			for i, want := range docs {
				for _, d := range contains(want["kind"].(string), want, list.Items[i]) {
					t.Errorf("%s", d)
				}
			}
		})
	}
}

// make chart packages the chart with the project's version: appVersion
// (the image tag) as make image tags the image, the chart version semver
// made from it; the package keeps the license annotation.
func TestHelmPackage(t *testing.T) {
	if _, err := helm(t, "version"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ version, chart string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-4-gabcdef0-dirty", "1.2.3-4-gabcdef0-dirty"},
		{"abcdef0", "0.0.0-gabcdef0"},
	} {
		dest := t.TempDir()
		cmd := exec.Command("make", "-s", "-C", repo(t), "chart", "VERSION="+tc.version, "CHART_DEST="+dest)
		cmd.Env = helmEnv(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make chart VERSION=%s: %v\n%s", tc.version, err, out)
		}
		pkg := filepath.Join(dest, "iptables-alerter-"+tc.chart+".tgz")
		out, err := helm(t, "show", "chart", pkg)
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Version     string            `json:"version"`
			AppVersion  string            `json:"appVersion"`
			Annotations map[string]string `json:"annotations"`
		}
		if err := yaml.Unmarshal(out, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Version != tc.chart || meta.AppVersion != tc.version || meta.Annotations["licenses"] != "Apache-2.0" {
			t.Errorf("VERSION=%s: chart %+v, want version %s, appVersion %s, licenses Apache-2.0", tc.version, meta, tc.chart, tc.version)
		}
		out, err = helm(t, "template", "x", pkg, "--kube-version", chartKubeVersion, "--show-only", "templates/daemonset.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if want := "image: ghcr.io/iptables-alerter/iptables-alerter:" + tc.version + "\n"; !strings.Contains(string(out), want) {
			t.Errorf("VERSION=%s: the package's DaemonSet has no %q", tc.version, strings.TrimSpace(want))
		}
	}
}

// helmCluster starts a kube-apiserver for a test that runs helm and
// kubectl against it, once both are found (a skip without them, a failure
// under CI=true), and returns its admin kubeconfig.
func helmCluster(t *testing.T) string {
	t.Helper()
	_, err := exec.LookPath("kubectl")
	nstest.Need(t, err == nil, "needs kubectl on PATH (tests/kube/build-kube.sh kubectl)")
	if _, err := helm(t, "version"); err != nil {
		t.Fatal(err)
	}
	c := kubetest.Start(t)
	return c.Kubeconfig("admin", c.AdminToken)
}

// What docs/install-helm.md says to run, with the real helm against a real
// kube-apiserver: install into a labelled namespace, upgrade to the agent
// alone (helm deletes what no longer renders), uninstall (everything goes
// but the Report CRD, which is kept).
func TestHelmInstall(t *testing.T) {
	kc := helmCluster(t)
	operatorCRDs(t, kc)

	kubectl(t, kc, "create", "namespace", "iptables-alerter")
	kubectl(t, kc, "label", "namespace", "iptables-alerter",
		"pod-security.kubernetes.io/enforce=privileged", "pod-security.kubernetes.io/audit=privileged", "pod-security.kubernetes.io/warn=privileged")
	run := func(args ...string) string {
		t.Helper()
		out, err := helm(t, append(args, "--kubeconfig", kc, "--namespace", "iptables-alerter")...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return string(out)
	}
	exists := func(args ...string) bool {
		t.Helper()
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kc, "get", "--ignore-not-found", "-o", "name"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl get %v: %v", args, err)
		}
		return len(bytes.TrimSpace(out)) > 0
	}

	out := run("install", "iptables-alerter", chartDir(t))
	// The notes say how to verify, as docs/install-helm.md does.
	if want := "kubectl -n iptables-alerter rollout status ds/iptables-alerter"; !strings.Contains(out, want) {
		t.Errorf("helm install printed no %q:\n%s", want, out)
	}
	for _, o := range [][]string{
		{"-n", "iptables-alerter", "daemonset/iptables-alerter"},
		{"-n", "iptables-alerter", "servicemonitor/iptables-alerter"},
		{"-n", "iptables-alerter", "prometheusrule/iptables-alerter"},
		{"clusterrolebinding/iptables-alerter-forward"},
		{"crd/reports.openreports.io"},
	} {
		if !exists(o...) {
			t.Errorf("after install: no %v", o)
		}
	}

	run("upgrade", "iptables-alerter", chartDir(t), "--reset-then-reuse-values", "--set", "forward.enabled=false")
	var ds appsv1.DaemonSet
	if err := json.Unmarshal(kubectl(t, kc, "-n", "iptables-alerter", "get", "daemonset/iptables-alerter", "-o", "json"), &ds); err != nil {
		t.Fatal(err)
	}
	if got := names(ds.Spec.Template.Spec.Containers); got != "agent" {
		t.Errorf("after upgrade with forward.enabled=false: containers %q, want agent", got)
	}
	if exists("clusterrolebinding/iptables-alerter-forward") {
		t.Errorf("after upgrade with forward.enabled=false: the forwarder's ClusterRoleBinding is still there")
	}

	// The notes warn where the defaults leave the metrics unread: an
	// agent turned off (the alerts read its metrics), and metrics behind
	// TLS with nobody allowed to read them. The first install had neither.
	if strings.Contains(out, "WARNING") {
		t.Errorf("helm install with the defaults warned:\n%s", out)
	}
	out = run("upgrade", "iptables-alerter", chartDir(t), "--reset-then-reuse-values", "--set", "forward.enabled=true", "--set", "agent.enabled=false", "--set", "metrics.secure.enabled=true")
	for _, want := range []string{"WARNING: agent.enabled=false", "WARNING: metrics.secure.readers is empty"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm upgrade with the agent off and metrics behind TLS printed no %q:\n%s", want, out)
		}
	}

	run("uninstall", "iptables-alerter")
	if exists("-n", "iptables-alerter", "daemonset/iptables-alerter") || exists("clusterrole/iptables-alerter-reports-view") {
		t.Errorf("after uninstall: the DaemonSet or a ClusterRole is still there")
	}
	if !exists("crd/reports.openreports.io") {
		t.Errorf("after uninstall: the Report CRD is gone (it holds every Report; the chart keeps it)")
	}
}

// The install notes say where the DaemonSet runs (the default
// nodeSelector's Linux nodes, or another's labels), and when
// kube-prometheus-stack would read neither
// the ServiceMonitor nor the PrometheusRule: each rendered (its kind
// served) without the release label the stack's Prometheus selects by
// default, naming those and the --set for each. Not where the kinds are
// not served (nothing rendered), nor with the label, nor on OpenShift
// (its Prometheus select without it). helm install --dry-run=server
// against a real kube-apiserver: helm template prints no notes, and
// they read the cluster's kinds.
func TestHelmNotesReleaseLabel(t *testing.T) {
	kc := helmCluster(t)
	kubectl(t, kc, "create", "namespace", "iptables-alerter")
	kps := filepath.Join(repo(t), "packaging/helm/values-kube-prometheus-stack.yaml")
	const (
		note    = "No release label on "
		smSet   = "--set metrics.serviceMonitor.additionalLabels.release=kps"
		ruleSet = "--set metrics.prometheusRule.additionalLabels.release=kps"
	)
	notes := func(t *testing.T, args ...string) string {
		t.Helper()
		args = append([]string{"install", "iptables-alerter", chartDir(t), "--dry-run=server", "--kubeconfig", kc, "--namespace", "iptables-alerter"}, args...)
		out, err := helm(t, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		_, n, ok := strings.Cut(string(out), "\nNOTES:\n")
		if !ok {
			t.Fatalf("helm %v printed no notes:\n%s", args, out)
		}
		return n
	}
	check := func(t *testing.T, n string, want, absent []string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(n, w) {
				t.Errorf("notes have no %q:\n%s", w, n)
			}
		}
		for _, a := range absent {
			if strings.Contains(n, a) {
				t.Errorf("notes have %q:\n%s", a, n)
			}
		}
	}

	// Before the operator's CRDs: nothing rendered, nothing to label.
	t.Run("kinds not served", func(t *testing.T) {
		check(t, notes(t), []string{"No ServiceMonitor or PrometheusRule"}, []string{note})
	})
	operatorCRDs(t, kc)
	for _, tc := range []struct {
		name         string
		args         []string
		want, absent []string
	}{
		{"defaults", nil, []string{"rolling out to every Linux node: ", note + "the ServiceMonitor and the PrometheusRule.", "nothing is scraped and no alert is loaded", "--reuse-values", smSet, ruleSet}, nil},
		// The headline names a nodeSelector's labels beside the default's.
		{"node pool", []string{"--set-string", "nodeSelector.node-role\\.kubernetes\\.io/infra="},
			[]string{"rolling out to every node labelled kubernetes.io/os=linux, node-role.kubernetes.io/infra=: "}, []string{"every Linux node"}},
		{"values file", []string{"-f", kps}, nil, []string{note}},
		{"rule unlabelled", []string{"--set", "metrics.serviceMonitor.additionalLabels.release=stack"},
			[]string{note + "the PrometheusRule.", "\nno alert is loaded.", ruleSet}, []string{smSet, "scraped"}},
		{"no ServiceMonitor", []string{"--set", "metrics.serviceMonitor.enabled=false", "--set", "metrics.prometheusRule.additionalLabels.release=stack"}, nil, []string{note}},
		{"another label", []string{"--set", "metrics.serviceMonitor.additionalLabels.team=net", "--set", "metrics.prometheusRule.additionalLabels.team=net"},
			[]string{note + "the ServiceMonitor and the PrometheusRule"}, nil},
		{"openshift", []string{"--set", "openshift.enabled=true"}, nil, []string{note}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, notes(t, tc.args...), tc.want, tc.absent)
		})
	}
}

// docs/install-helm.md's table has a row for every value of values.yaml,
// and no row for a value that is not there.
func TestHelmValuesDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir(t), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	// Maps whose keys are the user's, documented as one row.
	freeForm := map[string]bool{"nodeSelector": true, "affinity": true, "resources": true, "podLabels": true, "podAnnotations": true, "additionalLabels": true, "annotations": true}
	want := map[string]bool{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && !freeForm[k] {
				walk(prefix+k+".", sub)
				continue
			}
			want[prefix+k] = true
		}
	}
	walk("", values)
	doc, err := os.ReadFile(filepath.Join(repo(t), "docs", "install-helm.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			key, _, _ := strings.Cut(rest, "`")
			got[key] = true
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("docs/install-helm.md has no row for %s", k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("docs/install-helm.md has a row for %s, which values.yaml does not have", k)
		}
	}
}

// The chart in the tree is the release the tree is: its version is the
// semver of its appVersion, and appVersion is the image tag the kustomize
// base pins, once the base pins one.
func TestHelmChartVersion(t *testing.T) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	data, err := os.ReadFile(filepath.Join(chartDir(t), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != "v"+chart.Version {
		t.Errorf("Chart.yaml: appVersion %q, version %q: want appVersion v<version>", chart.AppVersion, chart.Version)
	}
	var k struct {
		Images []struct {
			Name, NewTag string
		} `json:"images"`
	}
	data, err = os.ReadFile(filepath.Join(repo(t), "packaging", "kubernetes", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	for _, img := range k.Images {
		if img.Name == "iptables-alerter" && img.NewTag != "latest" && img.NewTag != chart.AppVersion {
			t.Errorf("packaging/kubernetes pins the image tag %s, the chart's appVersion is %s", img.NewTag, chart.AppVersion)
		}
	}
}

// make release's chart pins the image it released by digest, and an
// upgrade to the next release's chart runs the next image even with the
// old release's values: `helm upgrade --reuse-values` (which
// docs/install-helm.md said to run) renders the new chart with the old
// release's values in place of its defaults. The digest was in
// values.yaml, so the new appVersion's tag came with the old digest, which
// the runtime pulls: every node back on the old binaries. Rendered here
// with the old chart's values given as the user's (what --reuse-values
// keeps, and more). A digest is kept off an image it is not of: another
// repository, another tag.
func TestReleaseChartUpgrade(t *testing.T) {
	if _, err := helm(t, "version"); err != nil {
		t.Fatal(err)
	}
	const reg = "registry.example/team"
	image := reg + "/iptables-alerter"
	release := func(version, digest string) string {
		t.Helper()
		dist := t.TempDir()
		if err := os.WriteFile(filepath.Join(dist, "image.digest"), []byte(digest+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("make", "-s", "-C", repo(t), "release-chart", "VERSION="+version, "REGISTRY="+reg, "DIST="+dist)
		cmd.Env = helmEnv(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make release-chart VERSION=%s: %v\n%s", version, err, out)
		}
		return filepath.Join(dist, "iptables-alerter-"+strings.TrimPrefix(version, "v")+".tgz")
	}
	oldDigest, newDigest := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	oldChart, newChart := release("v1.0.0", oldDigest), release("v1.1.0", newDigest)
	oldValues := filepath.Join(t.TempDir(), "old-values.yaml")
	out, err := helm(t, "show", "values", oldChart)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(oldValues, out, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"defaults", nil, image + ":v1.1.0@" + newDigest},
		{"the old release's values", []string{"-f", oldValues}, image + ":v1.1.0@" + newDigest},
		{"another repository", []string{"--set", "image.repository=mirror.example/iptables-alerter"}, "mirror.example/iptables-alerter:v1.1.0"},
		{"another tag", []string{"--set", "image.tag=v1.0.0"}, image + ":v1.0.0"},
		{"the user's digest", []string{"--set", "image.digest=sha256:" + strings.Repeat("c", 64)}, image + ":v1.1.0@sha256:" + strings.Repeat("c", 64)},
	} {
		args := append([]string{"template", "iptables-alerter", newChart, "--namespace", "iptables-alerter", "--kube-version", chartKubeVersion}, tc.args...)
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		pod := daemonSetPod(t, objects(t, out))
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			if c.Image != tc.want {
				t.Errorf("%s: container %s runs %s, want %s", tc.name, c.Name, c.Image, tc.want)
			}
		}
	}
	// The tree's chart pins nothing: no release made it.
	pod := daemonSetPod(t, objects(t, helmTemplate(t)))
	if got := pod.Containers[0].Image; strings.Contains(got, "@") {
		t.Errorf("the tree's chart pins %s", got)
	}

	// The upgrade itself, with both flags, against a real kube-apiserver.
	t.Run("helm upgrade", func(t *testing.T) {
		_, err := exec.LookPath("kubectl")
		nstest.Need(t, err == nil, "needs kubectl on PATH (tests/kube/build-kube.sh kubectl)")
		c := kubetest.Start(t)
		kc := c.Kubeconfig("admin", c.AdminToken)
		kubectl(t, kc, "create", "namespace", "iptables-alerter")
		kubectl(t, kc, "label", "namespace", "iptables-alerter", "pod-security.kubernetes.io/enforce=privileged")
		run := func(args ...string) {
			t.Helper()
			if out, err := helm(t, append(args, "--kubeconfig", kc, "--namespace", "iptables-alerter")...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}
		dsImage := func() string {
			var ds appsv1.DaemonSet
			if err := json.Unmarshal(kubectl(t, kc, "-n", "iptables-alerter", "get", "daemonset/iptables-alerter", "-o", "json"), &ds); err != nil {
				t.Fatal(err)
			}
			return ds.Spec.Template.Spec.Containers[0].Image
		}
		run("install", "iptables-alerter", oldChart)
		if got, want := dsImage(), image+":v1.0.0@"+oldDigest; got != want {
			t.Errorf("install: %s, want %s", got, want)
		}
		for _, flag := range []string{"--reuse-values", "--reset-then-reuse-values"} {
			run("upgrade", "iptables-alerter", newChart, flag)
			if got, want := dsImage(), image+":v1.1.0@"+newDigest; got != want {
				t.Errorf("upgrade %s: %s, want %s", flag, got, want)
			}
			run("rollback", "iptables-alerter", "1")
		}
	})
}

// kpsSet are values-kube-prometheus-stack.yaml's values as the --set flags
// docs/monitoring.md and docs/install-helm.md give an admin who installs
// the chart from a registry, without the checkout that holds the file.
var kpsSet = []string{
	"metrics.serviceMonitor.additionalLabels.release=kps",
	"metrics.prometheusRule.additionalLabels.release=kps",
	"networkPolicy.monitoringNamespaces={monitoring}",
}

// TestKubePrometheusStackSetFlags: the documented --set flags render what
// the values file does, and both pages give each of them.
func TestKubePrometheusStackSetFlags(t *testing.T) {
	kps := filepath.Join(repo(t), "packaging/helm/values-kube-prometheus-stack.yaml")
	want := string(helmTemplate(t, withAPI("--values="+kps)...))
	if got := string(helmTemplate(t, withAPI(kpsSet...)...)); got != want {
		t.Errorf("the --set flags render otherwise than %s:\n%s", kps, cmp.Diff(want, got))
	}
	for _, page := range []string{"docs/monitoring.md", "docs/install-helm.md"} {
		b, err := os.ReadFile(filepath.Join(repo(t), page))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range kpsSet {
			if !strings.Contains(string(b), s) {
				t.Errorf("%s does not give %s", page, s)
			}
		}
	}
}
