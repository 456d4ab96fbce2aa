package packaging

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestUserWorkloadOverlay (issue 27 item 4): the OpenShift
// user-workload-monitoring overlay gives UWM what it asks for: the
// namespace without the platform monitoring label (UWM ignores those
// namespaces), ServiceMonitor endpoints that read no file of the
// Prometheus pod (UWM refuses bearerTokenFile and caFile) but a token
// Secret and a CA ConfigMap that the render holds, and the metrics reader
// bound to the ServiceAccount whose token that is.
// TestKustomizeServerSideApply applies it to a real API server.
func TestUserWorkloadOverlay(t *testing.T) {
	dir := "packaging/openshift-user-workload"
	objs := objects(t, kustomize(t, filepath.Join(repo(t), dir)))
	ns := objs["Namespace//iptables-alerter"]["metadata"].(map[string]any)
	if labels, _ := ns["labels"].(map[string]any); labels["openshift.io/cluster-monitoring"] != nil {
		t.Errorf("namespace labels %v: UWM ignores a namespace with openshift.io/cluster-monitoring", labels)
	}
	var sm struct {
		Spec struct {
			Endpoints []map[string]any
		}
	}
	renderedLoose(t, dir, "ServiceMonitor", "iptables-alerter", &sm)
	if len(sm.Spec.Endpoints) != 2 {
		t.Fatalf("%d endpoints, want /metrics/agent and /metrics", len(sm.Spec.Endpoints))
	}
	for _, e := range sm.Spec.Endpoints {
		b, _ := yaml.Marshal(e)
		if strings.Contains(string(b), "File") {
			t.Errorf("endpoint %s reads a file of the Prometheus pod:\n%s", e["path"], b)
		}
		secret := e["authorization"].(map[string]any)["credentials"].(map[string]any)["name"].(string)
		cm := e["tlsConfig"].(map[string]any)["ca"].(map[string]any)["configMap"].(map[string]any)["name"].(string)
		s, ok := objs["Secret/iptables-alerter/"+secret]
		if !ok || s["type"] != "kubernetes.io/service-account-token" {
			t.Errorf("endpoint %s: token Secret %s not rendered as a ServiceAccount token", e["path"], secret)
		} else if sa := s["metadata"].(map[string]any)["annotations"].(map[string]any)["kubernetes.io/service-account.name"]; sa != "iptables-alerter-metrics-scraper" {
			t.Errorf("token Secret for %v, want iptables-alerter-metrics-scraper", sa)
		}
		if _, ok := objs["ConfigMap/iptables-alerter/"+cm]; !ok {
			t.Errorf("endpoint %s: CA ConfigMap %s not rendered", e["path"], cm)
		}
		if e["scheme"] != "https" {
			t.Errorf("endpoint %s: scheme %v", e["path"], e["scheme"])
		}
	}
	subjects := objs["ClusterRoleBinding//iptables-alerter-metrics-reader"]["subjects"].([]any)
	if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != "iptables-alerter-metrics-scraper" || subjects[0].(map[string]any)["namespace"] != "iptables-alerter" {
		t.Errorf("metrics reader bound to %v, want the scraper ServiceAccount alone", subjects)
	}
}

// TestHelmChartRepositoryExample: the console's catalog entry is a
// HelmChartRepository of an https chart repository (the console reads
// only http(s) repositories, through their index.yaml), named like the chart.
func TestHelmChartRepositoryExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo(t), "packaging/openshift/helmchartrepository.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		APIVersion string `json:"apiVersion"`
		Kind       string
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			Name             string
			ConnectionConfig struct{ URL string } `json:"connectionConfig"`
		}
	}
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(r.Spec.ConnectionConfig.URL)
	if r.APIVersion != "helm.openshift.io/v1beta1" || r.Kind != "HelmChartRepository" || r.Metadata.Namespace != "" || r.Spec.Name != "iptables-alerter" ||
		err != nil || u.Scheme != "https" || u.Host == "" || strings.HasSuffix(u.Path, "index.yaml") {
		t.Errorf("%+v: want a cluster-wide helm.openshift.io/v1beta1 HelmChartRepository of an https repository's base URL", r)
	}
	// The newest GitHub release's files, where make github-release puts
	// index.yaml, whose chart URLs are the Makefile's CHART_REPO_URL.
	mk, err := os.ReadFile(filepath.Join(repo(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CHART_REPO_URL \?= (https://github\.com/[^/]+/[^/]+/releases)/download/\$\(VERSION\)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no CHART_REPO_URL ?= https://github.com/ORG/REPO/releases/download/$(VERSION)")
	}
	if want := string(m[1]) + "/latest/download"; r.Spec.ConnectionConfig.URL != want {
		t.Errorf("HelmChartRepository url %s, want the newest release's files %s", r.Spec.ConnectionConfig.URL, want)
	}
	if !regexp.MustCompile(`(?m)^github-release:(.|\n)*\$\(DIST\)/index\.yaml`).Match(mk) {
		t.Error("Makefile: github-release does not attach index.yaml")
	}
}
