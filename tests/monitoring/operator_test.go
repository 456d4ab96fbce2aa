package monitoringtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/certtest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

const (
	// opPodIP is the agent's pod's address in the test's cluster network
	// namespace: the API server refuses loopback addresses in Endpoints
	// and EndpointSlices, so the agent listens on this one, as it listens
	// on its pod's.
	opPodIP = "10.234.7.1"
	opNode  = "node-e2e"
	// agentPort is the agent's metrics port (the Service's metrics port).
	agentPort = 9757
	// opWait bounds the waits on the scrape: the ServiceMonitor scrapes
	// every 60s and the operator's default evaluation interval is 30s, so
	// the first scrape and the first evaluation may each take that long.
	opWait = 4 * time.Minute
	// rulesDir and certsDir are where the Prometheus pod mounts the
	// operator's rule ConfigMaps and its TLS assets Secret (the
	// operator's pkg/prometheus.RulesDir and tlsAssetsDir).
	rulesDir = "/etc/prometheus/rules/"
	certsDir = "/etc/prometheus/certs/"
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
// kube-prometheus-stack cluster, and the one OpenShift's user-workload
// monitoring configures from its overlay. On a real kube-apiserver (no
// kubelet) with the operator's CRDs, our objects are installed; a
// Prometheus object selects ServiceMonitors and PrometheusRules as
// kube-prometheus-stack's (or UWM's) does; the real operator (v0.85.0)
// writes the configuration Secret and the rules ConfigMap; the test stands
// in for the kubelet and the endpoint controllers (the agent's Pod,
// Endpoints and EndpointSlice, pointing at a real agent with a pod using
// xt rules); and an upstream Prometheus runs the generated configuration
// until the agent's usage series are scraped, with the labels the
// ServiceMonitor gives, every target is up, every group of the rules is
// loaded and the breaking-usage alert fires for the pod's workload.
func TestPrometheusOperator(t *testing.T) {
	for _, v := range []opVariant{
		// kubectl apply -k packaging/prometheus-operator, as
		// docs/monitoring.md says (server-side: the CRDs are large, and
		// it is what the packaging tests apply too).
		{name: "kustomize", selectors: kpsSelectors, alertNamespace: "shop", install: func(e *opEnv) {
			e.kubectl("apply", "--server-side", "-k", "../../packaging/prometheus-operator")
		}},
		// The chart with the documented kube-prometheus-stack values, in
		// the namespace made as docs/install-helm.md says.
		{name: "helm", selectors: kpsSelectors, alertNamespace: "shop", install: func(e *opEnv) {
			e.kubectl("create", "namespace", "iptables-alerter")
			e.kubectl("label", "namespace", "iptables-alerter", "pod-security.kubernetes.io/enforce=privileged")
			e.run("helm", "install", "iptables-alerter", "../../packaging/helm/iptables-alerter", "--kubeconfig", e.kc,
				"--namespace", "iptables-alerter", "-f", "../../packaging/helm/values-kube-prometheus-stack.yaml")
		}},
		// OpenShift's user-workload monitoring: its Prometheus takes every
		// ServiceMonitor and PrometheusRule outside the platform's
		// namespaces; the metrics are behind the forwarder's TLS port,
		// scraped with the scraper ServiceAccount's token.
		{name: "openshift-user-workload", selectors: uwmSelectors, alertNamespace: "iptables-alerter", secure: true, install: func(e *opEnv) {
			// OpenShift's SCC kind (the overlay holds one) from a
			// stand-in CRD; the console's dashboard namespace.
			crd := filepath.Join(e.dir, "scc-crd.yaml")
			if err := os.WriteFile(crd, []byte(kubetest.MinimalCRD("security.openshift.io", "Cluster", "SecurityContextConstraints", "securitycontextconstraints")), 0o600); err != nil {
				e.t.Fatal(err)
			}
			e.kubectl("apply", "--server-side", "-f", crd)
			e.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/securitycontextconstraints.security.openshift.io")
			e.kubectl("create", "namespace", "openshift-config-managed")
			e.kubectl("apply", "--server-side", "-k", "../../packaging/openshift-user-workload")
			e.standInForOpenShift()
		}},
	} {
		t.Run(v.name, func(t *testing.T) { operatorEndToEnd(t, v) })
	}
}

// The Prometheus object's selectors. kube-prometheus-stack's (release
// "kps"): by label, in every namespace. OpenShift user-workload
// monitoring's: every object, in the namespaces platform monitoring does
// not own, with the namespace label enforced as the cluster monitoring
// operator sets it for UWM (each rule's expression made to select its
// PrometheusRule's namespace, and its output labelled with it).
const (
	kpsSelectors = `  serviceMonitorSelector: {matchLabels: {release: kps}}
  serviceMonitorNamespaceSelector: {}
  ruleSelector: {matchLabels: {release: kps}}
  ruleNamespaceSelector: {}
`
	uwmSelectors = `  serviceMonitorSelector: {}
  serviceMonitorNamespaceSelector: {matchExpressions: [{key: openshift.io/cluster-monitoring, operator: NotIn, values: ["true"]}]}
  ruleSelector: {}
  ruleNamespaceSelector: {matchExpressions: [{key: openshift.io/cluster-monitoring, operator: NotIn, values: ["true"]}]}
  enforcedNamespaceLabel: namespace
`
)

// opVariant is one way of installing our monitoring objects.
type opVariant struct {
	name string
	// selectors is the Prometheus object's spec lines that select.
	selectors string
	// alertNamespace is the namespace label the workload's alert has:
	// its pod's, or the PrometheusRule's where the label is enforced.
	alertNamespace string
	// secure: the metrics are served by the forwarder over TLS
	// (packaging/secure-metrics), the agent's on localhost only.
	secure  bool
	install func(e *opEnv)
}

// opEnv is one variant's cluster: everything runs in the network
// namespace at netns (API server, operator, agent, Prometheus), so the
// agent's address can be a pod's rather than loopback.
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
	prom = filepath.Join(toolsCache(), "prometheus-operator", "prometheus")
	for _, path := range []string{operator, crds, prom} {
		_, err := os.Stat(path)
		nstest.Need(t, err == nil, "needs "+path+" (tests/monitoring/build-prometheus-operator.sh)")
	}
	return operator, crds, prom
}

func operatorEndToEnd(t *testing.T, v opVariant) {
	operator, crds, promBin := needOperatorTools(t)
	e := &opEnv{t: t, dir: t.TempDir(), netns: clusterNetns(t)}
	e.kube = kubetest.StartIn(t, e.netns)
	e.kc = e.kube.Kubeconfig("admin", e.kube.AdminToken)
	e.cs = e.kube.Client()

	e.kubectl("apply", "--server-side", "-f", crds)
	e.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	v.install(e)
	e.prometheusObject(promVersion(t, promBin), v.selectors)

	// The operator, as in a cluster; its only way to a kubeconfig is
	// $KUBECONFIG (no flag).
	startIn(t, e.netns, []string{"KUBECONFIG=" + e.kc}, operator, "--web.listen-address=127.0.0.1:8080", "--log-level=info")
	config := e.generatedConfig()
	e.writeRuleFiles()
	e.writeTLSAssets(config)

	// The agent, and with secure metrics the forwarder serving its
	// metrics over TLS, as packaging/secure-metrics runs them (without
	// Reports: only its metrics matter here, and no Report CRD is served).
	ports := map[string]int32{"metrics": agentPort}
	agentAddr, agentArgs := fmt.Sprintf("%s:%d", opPodIP, agentPort), []string(nil)
	if v.secure {
		ports = map[string]int32{"https-metrics": 9443}
		agentAddr, agentArgs = "127.0.0.1:9757", []string{"--metrics-addr=127.0.0.1:9758"}
	}
	svc := e.standInForKubelet(ports)
	pod, _ := startAgent(t, e.dir, e.netns, agentAddr, agentArgs...)
	if v.secure {
		startIn(t, e.netns, nil, filepath.Join(e.dir, "iptables-alerter"), "forward", "--kubeconfig", e.kc,
			"--findings", filepath.Join(e.dir, "findings.jsonl"), "--checkpoint-dir", filepath.Join(e.dir, "forward"),
			"--node-name", opNode, "--reports=false", "--health-addr", "127.0.0.1:9756",
			"--secure-metrics-addr", fmt.Sprintf("%s:9443", opPodIP), "--tls-cert-file", filepath.Join(e.dir, "tls", "tls.crt"),
			"--tls-private-key-file", filepath.Join(e.dir, "tls", "tls.key"), "--agent-metrics", "http://127.0.0.1:9758/metrics")
	}

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
		"node": opNode, "component": "agent", "pod_namespace": "shop"} {
		if series[k] != v {
			t.Errorf("usage series label %s = %q, want %q (%v)", k, series[k], v, series)
		}
	}

	// Every target scrapes: the agent's (and with secure metrics the
	// forwarder's own), over TLS with the token when the metrics are
	// secure.
	targets := map[string]bool{"http://" + agentAddr + "/metrics": true}
	if v.secure {
		targets = map[string]bool{"https://" + opPodIP + ":9443/metrics/agent": true, "https://" + opPodIP + ":9443/metrics": true}
	}
	within(t, opWait, fmt.Sprintf("targets %v not all up", targets), func() bool {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					ScrapeURL string `json:"scrapeUrl"`
					Health    string `json:"health"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if !prom.api("/api/v1/targets", nil, &r) {
			return false
		}
		up := map[string]bool{}
		for _, tg := range r.Data.ActiveTargets {
			up[tg.ScrapeURL] = tg.Health == "up"
		}
		return maps.Equal(up, targets)
	})
	// Each target writes an up series of its own, told apart by its
	// component: behind TLS the agent's and the forwarder's targets share
	// the pod's address and port, and with the same labels they wrote one
	// series, its value whichever was scraped last (IPTablesAlerterAgentDown
	// missed a target down).
	components := []string{"agent"}
	if v.secure {
		components = []string{"agent", "forward"}
	}
	within(t, opWait, fmt.Sprintf("up series not one per component %v", components), func() bool {
		r := prom.query(t, `up{job="`+svc+`"} == 1`)
		var got []string
		for _, raw := range r.Data.Result {
			var s struct {
				Metric map[string]string `json:"metric"`
			}
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s.Metric["component"])
		}
		sort.Strings(got)
		return slices.Equal(got, components)
	})

	// The rules evaluate on those series: the workload's alert fires, in
	// the namespace Alertmanager will route it by.
	var fired alert
	within(t, opWait, "IPTablesBreakingOnRHEL10 not firing for Deployment/web", func() bool {
		for _, a := range prom.breaking(t) {
			if a.Labels["owner"] == "Deployment/web" && a.State == "firing" {
				fired = a
				return true
			}
		}
		return false
	})
	if fired.Labels["namespace"] != v.alertNamespace || fired.Labels["pod_namespace"] != "shop" {
		t.Errorf("IPTablesBreakingOnRHEL10's namespace %q and pod_namespace %q, want %q and \"shop\" (%v)",
			fired.Labels["namespace"], fired.Labels["pod_namespace"], v.alertNamespace, fired.Labels)
	}
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

// prometheusObject creates the Prometheus object k8s in namespace
// monitoring, selecting with selectors (kpsSelectors, uwmSelectors). Its
// apiserverConfig points the generated Kubernetes discovery at the test's
// API server (in a pod it would use the in-cluster config), with the admin
// token and the CA as files, as files mounted into the pod would be: this
// Prometheus runs on the test's host, where they are. (A credentials
// Secret would not do: operator v0.85.0 looks it up in each
// ServiceMonitor's namespace, not the Prometheus object's.)
func (e *opEnv) prometheusObject(version, selectors string) {
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
%s  apiserverConfig:
    host: %s
    authorization: {credentialsFile: %s}
    tlsConfig: {caFile: %s}
`, version, selectors, e.kube.URL, token, e.kube.CAFile)
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
// pod's name) as in the single replica of shard 0; and the paths of the
// pod's mounts of the rules ConfigMap and the TLS assets Secret point to
// where writeRuleFiles and writeTLSAssets write those objects' contents.
// Any other path of the pod's or variable left in it fails the test.
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
	for mount, local := range map[string]string{rulesDir: "rules", certsDir: "certs"} {
		plain = bytes.ReplaceAll(plain, []byte(mount), []byte(filepath.Join(e.dir, local)+"/"))
	}
	if bytes.Contains(plain, []byte("/etc/prometheus")) {
		e.t.Fatalf("the generated configuration needs more of the pod's files than the rules and TLS assets:\n%s", plain)
	}
	var cfg struct {
		RuleFiles []string `json:"rule_files"`
	}
	if err := yaml.Unmarshal(plain, &cfg); err != nil || len(cfg.RuleFiles) == 0 {
		e.t.Fatalf("the generated configuration loads no rule files (%v):\n%s", err, plain)
	}
	return plain
}

// writeTLSAssets writes the files of the operator's TLS assets Secret that
// config reads (the CA of a ServiceMonitor's tlsConfig) where config's
// rewritten paths point, as the pod's volume mount would.
func (e *opEnv) writeTLSAssets(config []byte) {
	e.t.Helper()
	dir := filepath.Join(e.dir, "certs")
	var want []string
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(dir+"/")+`([^\s"']+)`).FindAllSubmatch(config, -1) {
		want = append(want, string(m[1]))
	}
	if len(want) == 0 {
		return
	}
	var s *corev1.Secret
	within(e.t, opWait, fmt.Sprintf("the operator wrote no TLS assets %v", want), func() bool {
		var err error
		s, err = e.cs.CoreV1().Secrets("monitoring").Get(context.Background(), "prometheus-k8s-tls-assets-0", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, w := range want {
			if _, ok := s.Data[w]; !ok {
				return false
			}
		}
		return true
	})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	for _, w := range want {
		if err := os.WriteFile(filepath.Join(dir, w), s.Data[w], 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
}

// standInForOpenShift does what OpenShift's controllers do for the
// user-workload overlay, none of which runs here: service-ca's serving
// certificate for the metrics Service (written where the forwarder reads
// it) and its CA in the injected ConfigMap, and the scraper
// ServiceAccount's token in its token Secret (a TokenRequest token: the
// legacy token controller does not run).
func (e *opEnv) standInForOpenShift() {
	e.t.Helper()
	ctx := context.Background()
	const ns = "iptables-alerter"
	// Self-signed: its own CA.
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE",
		Bytes: certtest.Write(e.t, filepath.Join(e.dir, "tls"), "iptables-alerter-metrics.iptables-alerter.svc").Raw})
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "iptables-alerter-service-ca", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cm.Data = map[string]string{"service-ca.crt": string(ca)}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	sec, err := e.cs.CoreV1().Secrets(ns).Get(ctx, "iptables-alerter-metrics-scraper-token", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	sec.Data = map[string][]byte{"token": []byte(kubetest.Token(e.t, e.cs, ns, "iptables-alerter-metrics-scraper"))}
	if _, err := e.cs.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
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
// EndpointSlice of that Service with the pod's address and ports (by the
// Service's port name: the plain forwarder's is left out, no forwarder
// runs there). It returns the Service's name.
func (e *opEnv) standInForKubelet(ports map[string]int32) string {
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
	var epPorts []corev1.EndpointPort
	var slicePorts []discoveryv1.EndpointPort
	for _, p := range svc.Spec.Ports {
		if port, ok := ports[p.Name]; ok {
			epPorts = append(epPorts, corev1.EndpointPort{Name: p.Name, Port: port, Protocol: p.Protocol})
			slicePorts = append(slicePorts, discoveryv1.EndpointPort{Name: &p.Name, Port: &port, Protocol: &p.Protocol})
		}
	}
	if len(epPorts) != len(ports) {
		e.t.Fatalf("the Service %s has ports %+v, want %v", svc.Name, svc.Spec.Ports, ports)
	}
	if _, err := e.cs.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: ns, Labels: svc.Labels},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: opPodIP, NodeName: &node, TargetRef: ref}},
			Ports:     epPorts,
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
		Ports: slicePorts,
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
