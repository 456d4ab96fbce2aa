package monitoringtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nritest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
)

// wait bounds every wait of the end-to-end test: a liveness bound on a
// shared machine, not a speed goal (scrapes and evaluations run each
// second).
const wait = 2 * time.Minute

// start runs a process until the test ends: killed and waited for then,
// whatever the verdict, its output logged on failure.
func start(t *testing.T, name string, args ...string) {
	t.Helper()
	startIn(t, "", nil, name, args...)
}

// startIn is start inside the network namespace at netns (empty: the
// test's own), with env added to the test's environment. nsenter execs the
// binary (no fork for --net), so the process killed is the program itself.
func startIn(t *testing.T, netns string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if netns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=" + netns, "--", name}, args...)...)
	}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	out := &nstest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(name), out.String())
		}
	})
}

// eventually polls ok until it holds, failing the test after wait.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	within(t, wait, what, ok)
}

// within polls ok until it holds, failing the test after limit.
func within(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !ok(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", limit, what)
		}
	}
}

// server is a Prometheus server's HTTP API: at addr, through client (a
// plain one, or one that dials into the network namespace it runs in).
type server struct {
	addr   string
	client *http.Client
}

// api asks the server; ok is false while it does not answer (starting).
func (p server) api(path string, q url.Values, v any) bool {
	resp, err := p.client.Get("http://" + p.addr + path + "?" + q.Encode())
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	return json.NewDecoder(resp.Body).Decode(v) == nil
}

// ready reports whether the server answers /-/ready with 200.
func (p server) ready() bool {
	resp, err := p.client.Get("http://" + p.addr + "/-/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

type alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// breaking is the IPTablesBreakingOnRHEL10 alerts Prometheus holds now.
func (p server) breaking(t *testing.T) []alert {
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []alert `json:"alerts"`
		} `json:"data"`
	}
	if !p.api("/api/v1/alerts", nil, &r) || r.Status != "success" {
		t.Fatalf("GET /api/v1/alerts: %+v", r)
	}
	var out []alert
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == "IPTablesBreakingOnRHEL10" {
			out = append(out, a)
		}
	}
	return out
}

type result struct {
	Status    string `json:"status"`
	Error     string `json:"error"`
	ErrorType string `json:"errorType"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

func (p server) query(t *testing.T, expr string) result {
	t.Helper()
	return p.queryAt(t, expr, time.Time{})
}

// queryAt is query evaluated at a given time (zero: now).
func (p server) queryAt(t *testing.T, expr string, at time.Time) result {
	t.Helper()
	q := url.Values{"query": {expr}}
	if !at.IsZero() {
		q.Set("time", strconv.FormatInt(at.Unix(), 10))
	}
	var r result
	if !p.api("/api/v1/query", q, &r) && r.Status == "" {
		t.Fatalf("query %q: no answer", expr)
	}
	return r
}

// TestAlertEndToEnd (issue 16 item 2's done-when): a real Prometheus
// (Debian's prometheus, on loopback, scraping and evaluating each second,
// the shipped rules loaded) scrapes a real agent, which the runtime side
// of NRI in this process tells of a running pod whose network namespace
// holds an xt rule. The breaking-usage alert fires for its workload, with
// its namespace, owner and impact (the recorded per-pod series names the pod), and every query of the dashboard
// runs, the usage ones with results, and each of the console's copy (All
// as .+, on series with no cluster label) where the Grafana copy's gave
// some; when the pod's sandbox stops, its series leaves the agent's
// /metrics, the alert stays for the rules' hold, and the per-pod rule
// evaluated past the hold gives nothing.
func TestAlertEndToEnd(t *testing.T) {
	needTool(t, prometheus)
	nstest.NeedRoot(t, "iptables-nft")
	dir := t.TempDir()
	agentAddr := nstest.FreeAddr(t)
	pod, ad := startAgent(t, dir, "", agentAddr)

	promAddr := nstest.FreeAddr(t)
	ruleFile(t, dir)
	config := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [rules.yaml]
scrape_configs:
  - job_name: %s
    static_configs: [{targets: [%q]}]
`, job, agentAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)

	prom := server{addr: promAddr, client: http.DefaultClient}
	eventually(t, "Prometheus not ready", prom.ready)
	var fired alert
	eventually(t, "IPTablesBreakingOnRHEL10 not firing for the pod", func() bool {
		for _, a := range prom.breaking(t) {
			if a.Labels["owner"] == "Deployment/web" && a.State == "firing" {
				fired = a
				return true
			}
		}
		return false
	})
	for k, v := range map[string]string{"pod_namespace": "shop", "owner": "Deployment/web", "impact": "xt", "severity": "warning"} {
		if fired.Labels[k] != v {
			t.Errorf("alert label %s = %q, want %q (%v)", k, fired.Labels[k], v, fired.Labels)
		}
	}
	// The alert is the workload's; the recorded per-pod series names the pod.
	if r := prom.query(t, `pod:iptables_alerter_breaking_rules:max{owner="Deployment/web",pod_name="`+pod.Name+`"}`); len(r.Data.Result) != 1 {
		t.Errorf("no per-pod recorded series for %s: %+v", pod.Name, r)
	}

	// Every dashboard query runs on the real server; those on the usage
	// series see the pod (the others may rightly be empty: no error yet).
	exprs := loadDashboard(t)
	answered := make([]bool, len(exprs))
	for i, e := range exprs {
		var r result
		eventually(t, fmt.Sprintf("dashboard query %q: no result", e), func() bool {
			r = prom.query(t, e)
			return r.Status != "success" || len(r.Data.Result) > 0 || !strings.Contains(e, "iptables_alerter_agent_pod_rules")
		})
		if r.Status != "success" {
			t.Errorf("dashboard query %q: %s %s: %s", e, r.Status, r.ErrorType, r.Error)
		}
		answered[i] = len(r.Data.Result) > 0
	}
	// The console's copy, as the console sends it (All as .+), on series
	// with no cluster label, as OpenShift's: each query answers where the
	// Grafana copy's did, and the namespace variable lists the pod's.
	if r := prom.query(t, `count({job="`+job+`", cluster!=""})`); r.Status != "success" || len(r.Data.Result) != 0 {
		t.Fatalf("series with a cluster label: %+v", r)
	}
	console, variables := loadConsoleDashboard(t)
	if len(console) != len(exprs) {
		t.Fatalf("%d queries in the console's copy, %d in the Grafana copy", len(console), len(exprs))
	}
	for i, e := range console {
		r := prom.query(t, e)
		if r.Status != "success" || answered[i] && len(r.Data.Result) == 0 {
			t.Errorf("console query %q: %s %s %s, %d results (the Grafana copy's %q answered: %v)", e, r.Status, r.ErrorType, r.Error, len(r.Data.Result), exprs[i], answered[i])
		}
	}
	for _, e := range variables {
		r := prom.query(t, e)
		if r.Status != "success" || !slices.ContainsFunc(r.Data.Result, func(m json.RawMessage) bool {
			return strings.Contains(string(m), `"`+pod.Namespace+`"`)
		}) {
			t.Errorf("console variable query %q: %s %s %s %s, want the pod's namespace %q", e, r.Status, r.ErrorType, r.Error, r.Data.Result, pod.Namespace)
		}
	}

	if err := ad.StopPodSandbox(context.Background(), &nri.StateChangeEvent{Pod: pod}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod's series still scraped after its sandbox stopped", func() bool {
		return len(prom.query(t, `iptables_alerter_agent_pod_rules{pod_name="`+pod.Name+`"}`).Data.Result) == 0
	})
	// The rules hold the pod's series 10 minutes (an agent's rollout
	// leaves such a gap): the alert stays now, and the per-pod rule, as
	// Prometheus evaluates it past the hold, gives nothing (the alert then
	// resolves: promtool's TestRules).
	stopped := time.Now()
	time.Sleep(5 * time.Second) // five evaluations: without the hold, the alert is gone
	if !slices.ContainsFunc(prom.breaking(t), func(a alert) bool { return a.Labels["owner"] == "Deployment/web" && a.State == "firing" }) {
		t.Errorf("IPTablesBreakingOnRHEL10 resolved as soon as the pod's series left: %+v", prom.breaking(t))
	}
	expr := recordExpr(t, filepath.Join(dir, "rules.yaml"), "pod:iptables_alerter_breaking_rules:max")
	if r := prom.queryAt(t, expr, stopped.Add(11*time.Minute)); r.Status != "success" || len(r.Data.Result) != 0 {
		t.Errorf("the per-pod rule 11 minutes after the pod stopped: %+v", r)
	}
}

// recordExpr is the expression of the recording rule record in the rule
// file at path.
func recordExpr(t *testing.T, path, record string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Groups []struct {
			Rules []struct{ Record, Expr string } `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if r.Record == record {
				return r.Expr
			}
		}
	}
	t.Fatalf("%s: no recording rule %s", path, record)
	return ""
}

// startAgent runs a real agent (built from the tree, its metrics on
// agentAddr, in the network namespace at netns, empty for the test's own)
// that the runtime side of NRI in this process tells of one running pod,
// shop/web-7d4b9c8f5-x2k9q (owner Deployment/web), whose network namespace
// holds an xt rule. It returns the pod and the runtime side, to stop the
// pod with. extra are more flags of the agent.
func startAgent(t *testing.T, dir, netns, agentAddr string, extra ...string) (pod *api.PodSandbox, ad *nri.Adaptation) {
	t.Helper()
	bin := filepath.Join(dir, "iptables-alerter")
	if err := testbin.Build(bin, ""); err != nil {
		t.Fatal(err)
	}

	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "-m", "multiport", "--dports", "80,443", "-j", "DROP")
	pod = &api.PodSandbox{Id: "sandbox-e2e", Name: "web-7d4b9c8f5-x2k9q", Namespace: "shop", Uid: "uid-e2e",
		Labels: map[string]string{"pod-template-hash": "7d4b9c8f5"},
		Linux:  &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: ns.Path()}}}}
	ctr := &api.Container{Id: "ctr-e2e", PodSandboxId: pod.Id, Name: "app", State: api.ContainerState_CONTAINER_RUNNING}

	var sock string
	var err error
	ad, sock, err = nritest.Start(dir, func(ctx context.Context, cb nri.SyncCB) error {
		_, err := cb(ctx, []*api.PodSandbox{pod}, []*api.Container{ctr})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ad.Stop)

	// --host-proc "": the test's pods are not host-network ones.
	startIn(t, netns, nil, bin, append([]string{"agent", "--nri-socket", sock, "--node", "node-e2e", "--health-addr", agentAddr, "--host-proc", "",
		"--findings", filepath.Join(dir, "findings.jsonl"), "--state-dir", filepath.Join(dir, "seen"),
		"--allowlist", filepath.Join(dir, "no-allowlist.json"), "--vendors", filepath.Join(dir, "no-vendors.json")}, extra...)...)
	return pod, ad
}
