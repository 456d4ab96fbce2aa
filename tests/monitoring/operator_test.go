package monitoringtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

const (
	// opPodIP is the agent's pod's address in the test's cluster network
	// namespace: the API server refuses loopback addresses in Endpoints
	// and EndpointSlices, so the agent listens on this one, as it listens
	// on its pod's.
	opPodIP = "10.234.7.1"
	opNode   = "node-e2e"
	// agentPort is the agent's metrics port (the Service's metrics port).
	agentPort = 9757
	// opWait bounds the waits on the scrape: the ServiceMonitor scrapes
	// every 60s and the operator's default evaluation interval is 30s, so
	// the first scrape and the first evaluation may each take that long.
	opWait = 4 * time.Minute
	// rulesDir is where the Prometheus pod mounts the operator's rule
	// ConfigMaps (the operator's pkg/prometheus.RulesDir).
	rulesDir = "/etc/prometheus/rules/"
	// agentPodName is the DaemonSet's pod the test stands in for.
	agentPodName = "iptables-alerter-n8x2k"
)

// toolsCache is where tests/install-deps.sh builds the tools.
func toolsCache() string {
	if c := os.Getenv("IPTA_CACHE"); c != "" {
		return c
	}
	return "/var/cache/iptables-alerter"
}

// TestPrometheusOperator (issue 27 item 2): the agent's usage series reach
// the Prometheus that the Prometheus Operator's `release: kps` selection
// configures, for each way we ship the monitoring objects to a
// kube-prometheus-stack cluster. On a real kube-apiserver (no kubelet) with
// the operator's CRDs, our objects are installed; a Prometheus object
// selects ServiceMonitors and PrometheusRules by release: kps, as
// kube-prometheus-stack's does; the real operator (v0.85.0) writes the
// configuration Secret and the rules ConfigMap; the test stands in for the
// kubelet and the endpoint controllers (the agent's Pod, Endpoints and
// EndpointSlice, pointing at a real agent with a pod using xt rules); and
// an upstream Prometheus runs the generated configuration until the
// agent's usage series are scraped, with the labels the ServiceMonitor
// gives, every group of the rules is loaded and the breaking-usage alert
// fires for the pod's workload.
func TestPrometheusOperator(t *testing.T) {
	for _, v := range []struct {
		name    string
		install func(e *opEnv)
	}{
		// kubectl apply -k packaging/prometheus-operator, as
		// docs/monitoring.md says (server-side: the CRDs are large, and
		// it is what the packaging tests apply too).
		{"kustomize", func(e *opEnv) {
			e.kubectl("apply", "--server-side", "-k", "../../packaging/prometheus-operator")
		}},
		// The chart with the documented kube-prometheus-stack values, in
		// the namespace made as docs/install-helm.md says.
		{"helm", func(e *opEnv) {
			e.kubectl("create", "namespace", "iptables-alerter")
			e.kubectl("label", "namespace", "iptables-alerter", "pod-security.kubernetes.io/enforce=privileged")
			e.run("helm", "install", "iptables-alerter", "../../packaging/helm/iptables-alerter", "--kubeconfig", e.kc,
				"--namespace", "iptables-alerter", "-f", "../../packaging/helm/values-kube-prometheus-stack.yaml")
		}},
	} {
		t.Run(v.name, func(t *testing.T) { operatorEndToEnd(t, v.install) })
	}
}

// opEnv is one variant's cluster: everything runs in the network
// namespace at netns (API server, operator, agent, Prometheus), so the
// agent's address can be a node's rather than loopback.
type opEnv struct {
	t     *testing.T
	dir   string
	netns string
	kube  *kubetest.Cluster
	kc    string
	cs    kubernetes.Interface
}

// run runs a command in the cluster's network namespace and fails the test
// on error.
func (e *opEnv) run(name string, args ...string) []byte {
	e.t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=" + e.netns, "--", name}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

func (e *opEnv) kubectl(args ...string) []byte {
	e.t.Helper()
	return e.run("kubectl", append([]string{"--kubeconfig", e.kc}, args...)...)
}

// needOperatorTools skips (fails under CI=true) without the tools.
func needOperatorTools(t *testing.T) (operator, crds, prom string) {
	t.Helper()
	nstest.NeedRoot(t, "nsenter", "iptables-nft", "kubectl", "helm")
	kubetest.Need(t)
	operator = filepath.Join(toolsCache(), "prometheus-operator", "operator")
	crds = filepath.Join(toolsCache(), "prometheus-operator", "crds")
	prom = filepath.Join(toolsCache(), "prometheus", "prometheus")
	for path, build := range map[string]string{operator: "build-prometheus-operator.sh", crds: "build-prometheus-operator.sh", prom: "build-prometheus.sh"} {
		_, err := os.Stat(path)
		nstest.Need(t, err == nil, "needs "+path+" (tests/monitoring/"+build+")")
	}
	return operator, crds, prom
}

func operatorEndToEnd(t *testing.T, install func(e *opEnv)) {
	operator, crds, promBin := needOperatorTools(t)
	e := &opEnv{t: t, dir: t.TempDir(), netns: clusterNetns(t)}
	e.kube = kubetest.StartIn(t, e.netns)
	e.kc = e.kube.Kubeconfig("admin", e.kube.AdminToken)
	e.cs = e.kube.Client()

	e.kubectl("apply", "--server-side", "-f", crds)
	e.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	install(e)
	e.prometheusObject(promVersion(t, promBin))

	// The operator, as in a cluster; its only way to a kubeconfig is
	// $KUBECONFIG (no flag).
	startIn(t, e.netns, []string{"KUBECONFIG=" + e.kc}, operator, "--web.listen-address=127.0.0.1:8080", "--log-level=info")
	config := e.generatedConfig()
	e.writeRuleFiles()

	svc := e.standInForKubelet()
	pod, _ := startAgent(t, e.dir, e.netns, fmt.Sprintf("%s:%d", opPodIP, agentPort))

	cfgPath := filepath.Join(e.dir, "prometheus.yaml")
	if err := os.WriteFile(cfgPath, config, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the generated configuration, rule files rewritten:\n%s", config)
		}
	})
	startIn(t, e.netns, nil, promBin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(e.dir, "tsdb"),
		"--web.listen-address=127.0.0.1:9090")
	prom := server{addr: "127.0.0.1:9090", client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return kubetest.DialIn(ctx, e.netns, network, addr)
		}}}}
	eventually(t, "Prometheus not ready", prom.ready)
	t.Cleanup(func() {
		if t.Failed() {
			var r json.RawMessage
			prom.api("/api/v1/targets", nil, &r)
			t.Logf("Prometheus's targets: %s", r)
		}
	})

	// Every group of the shipped rules is loaded from the operator's
	// ConfigMap.
	want := ruleGroups(t)
	var loaded []string
	eventually(t, "rule groups not loaded", func() bool {
		var r struct {
			Data struct {
				Groups []struct {
					Name string `json:"name"`
					File string `json:"file"`
				} `json:"groups"`
			} `json:"data"`
		}
		if !prom.api("/api/v1/rules", nil, &r) {
			return false
		}
		loaded = loaded[:0]
		for _, g := range r.Data.Groups {
			loaded = append(loaded, g.Name)
		}
		sort.Strings(loaded)
		return strings.Join(loaded, ",") == strings.Join(want, ",")
	})

	// The agent's usage series, with the labels the ServiceMonitor and its
	// relabeling give: the Service as job, the node of the agent's pod.
	var series map[string]string
	within(t, opWait, "the agent's usage series not scraped", func() bool {
		r := prom.query(t, `iptables_alerter_agent_pod_rules{pod_name="`+pod.Name+`"}`)
		if len(r.Data.Result) == 0 {
			return false
		}
		var s struct {
			Metric map[string]string `json:"metric"`
		}
		if err := json.Unmarshal(r.Data.Result[0], &s); err != nil {
			t.Fatal(err)
		}
		series = s.Metric
		return true
	})
	for k, v := range map[string]string{"job": svc, "service": svc, "namespace": "iptables-alerter", "pod": agentPodName,
		"node": opNode, "pod_namespace": "shop"} {
		if series[k] != v {
			t.Errorf("usage series label %s = %q, want %q (%v)", k, series[k], v, series)
		}
	}

	// The rules evaluate on those series: the workload's alert fires.
	within(t, opWait, "IPTablesBreakingOnRHEL10 not firing for Deployment/web", func() bool {
		for _, a := range prom.breaking(t) {
			if a.Labels["owner"] == "Deployment/web" && a.State == "firing" {
				return true
			}
		}
		return false
	})
}

// clusterNetns makes the network namespace the variant's cluster runs in:
// loopback up, and the pod's address on a veth pair with both ends inside
// (this VM's kernel has no dummy links; tests/cluster does the same).
func clusterNetns(t *testing.T) string {
	t.Helper()
	ns := nstest.New(t)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "ipta-node", "type", "veth", "peer", "name", "ipta-peer"},
		{"addr", "add", opPodIP + "/24", "dev", "ipta-node"},
		{"link", "set", "ipta-node", "up"},
		{"link", "set", "ipta-peer", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ns.Name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	return ns.Path()
}

// promVersion is the version the Prometheus binary says it is, for the
// Prometheus object's spec.version: the operator writes the configuration
// for that version.
func promVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	m := regexp.MustCompile(`prometheus, version (\d+\.\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s --version: no version in %q", bin, out)
	}
	return "v" + string(m[1])
}

// prometheusObject creates the Prometheus object kube-prometheus-stack
// would (release "kps" in namespace monitoring): ServiceMonitors and
// PrometheusRules selected by release: kps in every namespace. Its
// apiserverConfig points the generated Kubernetes discovery at the test's
// API server (in a pod it would use the in-cluster config), with the admin
// token and the CA as files, as files mounted into the pod would be: this
// Prometheus runs on the test's host, where they are. (A credentials
// Secret would not do: operator v0.85.0 looks it up in each
// ServiceMonitor's namespace, not the Prometheus object's.)
func (e *opEnv) prometheusObject(version string) {
	e.t.Helper()
	token := filepath.Join(e.dir, "kube-apiserver.token")
	if err := os.WriteFile(token, []byte(e.kube.AdminToken), 0o600); err != nil {
		e.t.Fatal(err)
	}
	objects := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: monitoring}
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: k8s, namespace: monitoring}
spec:
  version: %s
  serviceMonitorSelector: {matchLabels: {release: kps}}
  serviceMonitorNamespaceSelector: {}
  ruleSelector: {matchLabels: {release: kps}}
  ruleNamespaceSelector: {}
  apiserverConfig:
    host: %s
    authorization: {credentialsFile: %s}
    tlsConfig: {caFile: %s}
`, version, e.kube.URL, token, e.kube.CAFile)
	path := filepath.Join(e.dir, "prometheus-object.yaml")
	if err := os.WriteFile(path, []byte(objects), 0o600); err != nil {
		e.t.Fatal(err)
	}
	e.kubectl("apply", "-f", path)
}

// generatedConfig waits until the operator's configuration Secret holds
// the scrape job of our ServiceMonitor, and returns it made runnable
// outside the Prometheus pod, doing what the pod does to it and nothing
// else: the config reloader sidecar expands the $(VAR)s of the pod's
// environment (the shard, which a target's keep rule matches, and the
// pod's name) as in the single replica of shard 0; and the rule files'
// paths, which are the pod's mount of the rules ConfigMap, point to where
// writeRuleFiles writes that ConfigMap's contents. Any other path of the
// pod's or variable left in it fails the test.
func (e *opEnv) generatedConfig() []byte {
	e.t.Helper()
	const job = "serviceMonitor/iptables-alerter/iptables-alerter/0"
	var plain []byte
	within(e.t, opWait, "the operator wrote no configuration with the job "+job, func() bool {
		s, err := e.cs.CoreV1().Secrets("monitoring").Get(context.Background(), "prometheus-k8s", metav1.GetOptions{})
		if err != nil {
			return false
		}
		zr, err := gzip.NewReader(bytes.NewReader(s.Data["prometheus.yaml.gz"]))
		if err != nil {
			return false
		}
		plain, err = io.ReadAll(zr)
		return err == nil && bytes.Contains(plain, []byte("job_name: "+job+"\n"))
	})
	env := map[string]string{"SHARD": "0", "POD_NAME": "prometheus-k8s-0"}
	plain = envVar.ReplaceAllFunc(plain, func(v []byte) []byte {
		if val, ok := env[string(envVar.FindSubmatch(v)[1])]; ok {
			return []byte(val)
		}
		return v
	})
	if v := envVar.Find(plain); v != nil {
		e.t.Fatalf("the generated configuration needs %s of the pod's environment:\n%s", v, plain)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(plain, &cfg); err != nil {
		e.t.Fatalf("the generated configuration: %v\n%s", err, plain)
	}
	files, _ := cfg["rule_files"].([]any)
	if len(files) == 0 {
		e.t.Fatalf("the generated configuration loads no rule files:\n%s", plain)
	}
	for i, f := range files {
		s, _ := f.(string)
		if !strings.HasPrefix(s, rulesDir) {
			e.t.Fatalf("rule file %q not under the pod's %s", s, rulesDir)
		}
		files[i] = filepath.Join(e.dir, "rules", strings.TrimPrefix(s, rulesDir))
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if bytes.Contains(out, []byte("/etc/prometheus")) {
		e.t.Fatalf("the generated configuration needs more of the pod's files than the rules:\n%s", out)
	}
	return out
}

// envVar is a reference to the pod's environment, as the config reloader
// expands it.
var envVar = regexp.MustCompile(`\$\(([A-Za-z0-9_]+)\)`)

// writeRuleFiles waits until the operator's rules ConfigMap holds our
// PrometheusRule and writes its files where the rewritten rule_files
// point, as the pod's volume mount would.
func (e *opEnv) writeRuleFiles() {
	e.t.Helper()
	var cm *corev1.ConfigMap
	within(e.t, opWait, "the operator wrote no rules ConfigMap with our PrometheusRule", func() bool {
		var err error
		cm, err = e.cs.CoreV1().ConfigMaps("monitoring").Get(context.Background(), "prometheus-k8s-rulefiles-0", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for k := range cm.Data {
			if strings.HasPrefix(k, "iptables-alerter-") {
				return true
			}
		}
		return false
	})
	dir := filepath.Join(e.dir, "rules", cm.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
}

// standInForKubelet creates what the DaemonSet controller, the scheduler,
// the kubelet and the endpoint controllers would for one node's agent,
// none of which runs here: the agent's Pod (labelled as the metrics
// Service selects, on node-e2e) and the Endpoints and
// EndpointSlice of that Service with the pod's address and the agent's
// metrics port. The forwarder's port is left out: no forwarder runs. It
// returns the Service's name.
func (e *opEnv) standInForKubelet() string {
	e.t.Helper()
	ctx := context.Background()
	const ns = "iptables-alerter"
	svcs, err := e.cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=iptables-alerter"})
	if err != nil || len(svcs.Items) != 1 {
		e.t.Fatalf("want the one metrics Service in %s: %v %v", ns, svcs, err)
	}
	svc := svcs.Items[0]
	node := opNode
	pod, err := e.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: agentPodName, Namespace: ns, Labels: svc.Spec.Selector},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "agent", Image: "iptables-alerter:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create the agent's pod: %v", err)
	}
	ref := &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID}
	var found bool
	for _, p := range svc.Spec.Ports {
		found = found || p.Name == "metrics"
	}
	if !found {
		e.t.Fatalf("the Service %s has no metrics port: %+v", svc.Name, svc.Spec.Ports)
	}
	port, name, tcp := int32(agentPort), "metrics", corev1.ProtocolTCP
	if _, err := e.cs.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: ns, Labels: svc.Labels},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: opPodIP, NodeName: &node, TargetRef: ref}},
			Ports:     []corev1.EndpointPort{{Name: name, Port: port, Protocol: tcp}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create the Service's Endpoints: %v", err)
	}
	ready := true
	if _, err := e.cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc.Name + "-x7k2p", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{opPodIP}, NodeName: &node, TargetRef: ref,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &tcp}},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create the Service's EndpointSlice: %v", err)
	}
	return svc.Name
}

// ruleGroups is the names of the shipped PrometheusRule's groups, sorted.
func ruleGroups(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(ruleFile(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Groups []struct {
			Name string `json:"name"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range spec.Groups {
		names = append(names, g.Name)
	}
	sort.Strings(names)
	return names
}
