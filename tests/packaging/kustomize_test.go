package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kustomizations are every kustomization that deploys the DaemonSet.
var kustomizations = []string{"packaging/kubernetes", "packaging/prometheus-operator", "packaging/openshift", "packaging/openshift-no-sidecar", "packaging/openshift-user-workload"}

// monitored are the kustomizations with the monitoring component (the
// Prometheus Operator's kinds).
var monitored = []string{"packaging/prometheus-operator", "packaging/openshift", "packaging/openshift-no-sidecar", "packaging/openshift-user-workload"}

// releaseTag is a release's tag: vMAJOR.MINOR.PATCH.
var releaseTag = regexp.MustCompile(`^v([0-9]+)\.([0-9]+)\.([0-9]+)$`)

// baseImage is the image the kustomize base names, name and tag.
func baseImage(t *testing.T) (name, tag string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo(t), "packaging/kubernetes/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct{ Name, NewName, NewTag, Digest string }
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != 1 || k.Images[0].Name != "iptables-alerter" {
		t.Fatalf("images %+v: want the one entry iptables-alerter", k.Images)
	}
	return k.Images[0].NewName, k.Images[0].NewTag
}

// semver gives a release tag's numbers, to compare.
func semver(tag string) []int {
	m := releaseTag.FindStringSubmatch(tag)
	if m == nil {
		return nil
	}
	var v []int
	for _, s := range m[1:] {
		n, _ := strconv.Atoi(s)
		v = append(v, n)
	}
	return v
}

// TestReleaseTag: every container of every kustomization runs the
// release's image by its tag, never :latest; the tag is the release this
// tree is: at a tagged commit that tag (make set-release before tagging),
// between releases the last one or the next.
func TestReleaseTag(t *testing.T) {
	name, tag := baseImage(t)
	if !releaseTag.MatchString(tag) {
		t.Fatalf("newTag %q: want a release tag vX.Y.Z", tag)
	}
	for _, k := range kustomizations {
		spec := renderedDaemonSet(t, k).Spec.Template.Spec
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if c.Image != name+":"+tag {
				t.Errorf("%s: %s runs %q, want %s:%s", k, c.Name, c.Image, name, tag)
			}
		}
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: the tag is not compared with the repository's")
	}
	if out, err := exec.Command("git", "-C", repo(t), "tag", "--points-at", "HEAD", "--list", "v*").Output(); err == nil {
		for _, at := range strings.Fields(string(out)) {
			if releaseTag.MatchString(at) && at != tag {
				t.Errorf("HEAD is tagged %s but the kustomize base pulls %s: make set-release RELEASE=%s before tagging", at, tag, at)
			}
		}
	}
	if out, err := exec.Command("git", "-C", repo(t), "describe", "--tags", "--abbrev=0", "--match", "v*").Output(); err == nil {
		last := strings.TrimSpace(string(out))
		if v := semver(last); v != nil && slices.Compare(semver(tag), v) < 0 {
			t.Errorf("the kustomize base pulls %s, older than the last release %s", tag, last)
		}
	}
}

// TestOwnOverlay: the overlay the docs tell an admin to write, outside
// the repository, sets another image and, with the monitoring component,
// the label kube-prometheus-stack selects ServiceMonitors by, and leaves
// the tracked base as it is.
func TestOwnOverlay(t *testing.T) {
	name, _ := baseImage(t)
	dir := ownOverlay(t, `images:
  - name: `+name+`
    newName: registry.example.com/mirror/iptables-alerter
    digest: sha256:`+strings.Repeat("ab", 32)+`
patches:
  - target: {kind: ServiceMonitor, name: iptables-alerter}
    patch: |-
      - op: add
        path: /metadata/labels/release
        value: kube-prometheus-stack
`, "packaging/kubernetes", "packaging/kubernetes/components/monitoring")
	spec := renderedDaemonSet(t, dir).Spec.Template.Spec
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if want := "registry.example.com/mirror/iptables-alerter@sha256:" + strings.Repeat("ab", 32); c.Image != want {
			t.Errorf("%s runs %q, want %s", c.Name, c.Image, want)
		}
	}
	var sm struct {
		Metadata struct{ Labels map[string]string }
	}
	renderedLoose(t, dir, "ServiceMonitor", "iptables-alerter", &sm)
	if sm.Metadata.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v: no release label", sm.Metadata.Labels)
	}
}

// relabeling is a ServiceMonitor endpoint's relabelling rule.
type relabeling struct {
	Action       string
	SourceLabels []string `json:"sourceLabels"`
	TargetLabel  string   `json:"targetLabel"`
	Replacement  *string  `json:"replacement"`
}

// smEndpoint is what the tests read of a ServiceMonitor endpoint.
type smEndpoint struct {
	Port, Path  string
	Relabelings []relabeling
}

// TestServiceMonitorNode: every endpoint of every ServiceMonitor shipped
// labels its series with the node the pod runs on and the component it
// scrapes, and no two endpoints give their targets the same labels.
func TestServiceMonitorNode(t *testing.T) {
	for _, k := range append(slices.Clone(monitored), "secure-metrics") {
		t.Run(filepath.Base(k), func(t *testing.T) {
			dir := k
			if k == "secure-metrics" {
				dir = secureOverlay(t)
			}
			var sm struct {
				Spec struct{ Endpoints []smEndpoint }
			}
			renderedLoose(t, dir, "ServiceMonitor", "iptables-alerter", &sm)
			if len(sm.Spec.Endpoints) != 2 {
				t.Errorf("%d endpoints, want the agent's and the forwarder's", len(sm.Spec.Endpoints))
			}
			checkEndpoints(t, sm.Spec.Endpoints)
		})
	}
}

// checkEndpoints: each endpoint relabels the pod's node to node and says
// which component it scrapes, and the endpoints' targets differ in their
// labels. The Prometheus Operator puts no path in a target's labels: two
// endpoints on one port (the forwarder's TLS port serves /metrics/agent and
// /metrics) with nothing else between them write one up series, and one of
// every go_*, process_* and build_info series, each sample from whichever
// target was scraped last.
func checkEndpoints(t *testing.T, eps []smEndpoint) {
	t.Helper()
	seen := map[string]string{}
	for _, e := range eps {
		if !slices.ContainsFunc(e.Relabelings, func(r relabeling) bool {
			return r.Action == "replace" && slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_node_name"}) && r.TargetLabel == "node"
		}) {
			t.Errorf("endpoint %s %s: no relabelling of __meta_kubernetes_pod_node_name to node: %+v", e.Port, e.Path, e.Relabelings)
		}
		// The port is in the target's instance; the rest is what the
		// relabellings set to a fixed value.
		labels := []string{"port=" + e.Port}
		for _, r := range e.Relabelings {
			if (r.Action == "" || r.Action == "replace") && len(r.SourceLabels) == 0 && r.Replacement != nil {
				labels = append(labels, r.TargetLabel+"="+*r.Replacement)
			}
		}
		if !strings.Contains(strings.Join(labels, ","), ",component=") {
			t.Errorf("endpoint %s %s: no component label (%v)", e.Port, e.Path, labels)
		}
		slices.Sort(labels)
		key := strings.Join(labels, ",")
		if other, dup := seen[key]; dup {
			t.Errorf("endpoints %s and %s %s: their targets both get the labels {%s}", other, e.Port, e.Path, key)
		}
		seen[key] = e.Port + " " + e.Path
	}
}

// TestSecureMetricsArgs: the secure-metrics component restates each
// container's args (a merge replaces the list whole): they are the base's,
// --health-addr on loopback (same port), with exactly the TLS flags added
// (and, on OpenShift, its network plugin for node mode), so a flag added
// to the base is not lost where metrics are behind TLS.
func TestSecureMetricsArgs(t *testing.T) {
	base := renderedDaemonSet(t, "packaging/kubernetes").Spec.Template.Spec
	for _, dir := range []string{"", "packaging/openshift"} {
		if dir == "" {
			dir = secureOverlay(t)
		}
		spec := renderedDaemonSet(t, dir).Spec.Template.Spec
		agent := []string{"--metrics-addr=127.0.0.1:9758"}
		if dir == "packaging/openshift" {
			// OpenShift's network plugin, for node mode (issue 25), and
			// its OS image answering for what the plugin's rules need.
			agent = append(agent, "--platform=ovn-kubernetes", "--platform-os-kept")
		}
		for name, added := range map[string][]string{
			"agent": agent,
			"forward": {"--secure-metrics-addr=:9443", "--tls-cert-file=/etc/iptables-alerter/tls/tls.crt",
				"--tls-private-key-file=/etc/iptables-alerter/tls/tls.key", "--agent-metrics=http://127.0.0.1:9758/metrics"},
		} {
			want := slices.Clone(container(t, base, name).Args)
			for i, a := range want {
				if port, ok := strings.CutPrefix(a, "--health-addr=:"); ok {
					want[i] = "--health-addr=127.0.0.1:" + port
				}
			}
			want = append(want, added...)
			if got := container(t, spec, name).Args; !slices.Equal(got, want) {
				t.Errorf("%s args:\n%q\nwant the base's, --health-addr on loopback, and the TLS flags:\n%q", name, got, want)
			}
		}
	}
}

// TestLinuxNodes: the DaemonSets run only on Linux nodes, the platforms
// the image is built for.
func TestLinuxNodes(t *testing.T) {
	for _, k := range kustomizations {
		if got := renderedDaemonSet(t, k).Spec.Template.Spec.NodeSelector; got["kubernetes.io/os"] != "linux" {
			t.Errorf("%s: nodeSelector %v: want kubernetes.io/os: linux", k, got)
		}
	}
}
