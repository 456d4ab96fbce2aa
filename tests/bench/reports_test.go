package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

var (
	reportsBin       = flag.String("reports-bin", "../../bin/iptables-alerter", "Reports: full build whose forward and report are measured")
	reportsFindings  = flag.Int("reports-findings", 5000, "Reports: findings the forwarders keep Reports for, one pod each")
	reportsWorkloads = flag.Int("reports-workloads", 500, "Reports: workloads (Deployments) the findings' pods belong to")
	reportsNodes     = flag.Int("reports-nodes", 50, "Reports: nodes, one forwarder each; each workload's pods sit on two")
	reportsObjects   = flag.Int("reports-objects", 1000, "Reports: Reports of MaxResults results each that report reads")
	reportsRuns      = flag.Int("reports-runs", 5, "Reports: runs of the report over them, the median printed")
)

// reportsNamespaces hold the workloads and Reports, round robin.
const reportsNamespaces = 10

// BenchmarkReports measures the forwarder keeping OpenReports Reports and
// the report reading them back, against a real etcd and kube-apiserver
// (tests/kube/kubetest) with the Report CRD of packaging/crds.
//
// The forwarder: -reports-findings findings of pods of -reports-workloads
// Deployments (ReplicaSet and pods created in the API, linked as the
// controllers would), spread over -reports-nodes nodes, each node's
// findings followed by its own forwarder, the real binary, as on a
// cluster. One forwarder could not do it in time: its --kube-api-qps (20
// by default) holds it to about 5 findings a second. The findings are copies of one real record, the hook's on a
// netns holding Istio's nat rules and a legacy rule (the demo's), each
// naming its own pod. Counted between the forwarders' start and their
// last Report write: the API server's own requests (apiserver_request_total,
// by resource and verb) and the forwarders' CPU (schedstat).
//
// The report: -reports-objects Reports of MaxResults results each (100,000
// pods by default), copies of a result a forwarder wrote, created
// directly; then `iptables-alerter report` over all namespaces, its wall
// time and peak RSS (GNU time's, of a process forked from a small one: a
// child of this process would count this process's pages).
//
//	make build && go test -run XXX -bench Reports -benchtime 1x ./tests/bench
func BenchmarkReports(b *testing.B) {
	nstest.NeedRoot(b, "ip", "iptables-nft-restore", "iptables-legacy")
	kubetest.Need(b)
	bin, err := filepath.Abs(*reportsBin)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		b.Fatal("needs GNU time at /usr/bin/time (apt-get install time)")
	}
	began := time.Now()
	c := kubetest.Start(b)
	c.CRD(b, "../../packaging/crds/openreports.io_reports.yaml", openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	kubeconfig := c.Kubeconfig("bench", c.AdminToken)
	cfg := c.Config(c.AdminToken)
	// The bench's own objects go as fast as the API server takes them,
	// and a loaded machine's deletes of 1,000 Reports take their time.
	cfg.QPS, cfg.Timeout = -1, 5*time.Minute
	kube := kubernetes.NewForConfigOrDie(cfg)
	rc := versioned.NewForConfigOrDie(cfg)
	fmt.Printf("\nReports against kube-apiserver %s and etcd on loopback, load %s; started in %s\n",
		kubeVersion(), loadavg(), time.Since(began).Round(time.Second))

	rec := realRecord(b, bin)
	pods := makeWorkloads(b, kube, *reportsWorkloads, *reportsFindings, *reportsNodes)
	result := benchForward(b, c, bin, kubeconfig, rec, pods, *reportsNodes)
	benchReport(b, c, rc, bin, kubeconfig, result, pods, *reportsObjects)
}

// realRecord is the hook's record of a pod netns with the demo's rules.
func realRecord(b *testing.B, bin string) findings.Record {
	ns := nstest.New(b)
	ns.Restore(nstest.IstioNAT, "iptables-nft-restore")
	ns.Run("iptables-legacy", "-A", "OUTPUT", "-d", "169.254.169.254", "-p", "tcp", "--dport", "80", "-j", "DROP")
	dir := b.TempDir()
	bundle := filepath.Join(dir, "bundle")
	os.MkdirAll(bundle, 0o755)
	cfg := fmt.Sprintf(`{"ociVersion":"1.0.2","linux":{"namespaces":[{"type":"network","path":"%s"}]}}`, ns.Path())
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	state, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": "c0", "status": "running", "bundle": bundle,
		"annotations": map[string]string{"io.kubernetes.pod.namespace": "bench", "io.kubernetes.pod.name": "p", "io.kubernetes.pod.uid": "u",
			"io.kubernetes.container.name": "app", "io.kubernetes.cri-o.SandboxID": "sb0",
			"io.kubernetes.cri-o.UserRequestedImage": "quay.io/example/mesh-app:1.0"}})
	file := filepath.Join(dir, "findings.jsonl")
	cmd := exec.Command(bin, "hook", "--stage", "poststart", "--findings", file, "--state-dir", filepath.Join(dir, "state"), "--node", "node-0")
	cmd.Stdin = bytes.NewReader(state)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("hook: %v: %s", err, out)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	var rec findings.Record
	if err := json.Unmarshal(bytes.TrimSpace(data), &rec); err != nil || !rec.HasUsage() {
		b.Fatalf("hook's record %q: %v", data, err)
	}
	return rec
}

// benchPod is a pod the API server holds and the node it is on.
type benchPod struct {
	namespace, name string
	uid             types.UID
	node            int
}

// makeWorkloads creates n pods of w Deployments' ReplicaSets (the
// Deployments themselves are not needed: the owner lookup reads the
// ReplicaSet), each workload's pods on two of nodes.
func makeWorkloads(b *testing.B, kube kubernetes.Interface, w, n, nodes int) []benchPod {
	ctx := context.Background()
	start := time.Now()
	for i := 0; i < reportsNamespaces; i++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%d", i)}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// The Nodes the forwarders label (--node-label): without them each
	// patch is a 404, tried again.
	parallel(b, nodes, func(i int) error {
		_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)}}, metav1.CreateOptions{})
		return err
	})
	rsUID := make([]types.UID, w)
	parallel(b, w, func(i int) error {
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web%d-5d8f7", i), Namespace: fmt.Sprintf("bench-%d", i%reportsNamespaces),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: fmt.Sprintf("web%d", i),
				UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)), Controller: ptr(true)}}},
			Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "quay.io/example/web:1.0"}}}}}}
		got, err := kube.AppsV1().ReplicaSets(rs.Namespace).Create(ctx, rs, metav1.CreateOptions{})
		if err == nil {
			rsUID[i] = got.UID
		}
		return err
	})
	pods := make([]benchPod, n)
	parallel(b, n, func(i int) error {
		wl, k := i%w, i/w
		rsName := fmt.Sprintf("web%d-5d8f7", wl)
		node := (wl*2 + k%2) % nodes
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-p%d", rsName, k), Namespace: fmt.Sprintf("bench-%d", wl%reportsNamespaces),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rsName, UID: rsUID[wl], Controller: ptr(true)}}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", node), Containers: []corev1.Container{{Name: "app", Image: "quay.io/example/web:1.0"}}}}
		got, err := kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			pods[i] = benchPod{namespace: got.Namespace, name: got.Name, uid: got.UID, node: node}
		}
		return err
	})
	fmt.Printf("  %d ReplicaSets and %d pods of %d Deployments in %d namespaces created in %s\n",
		w, n, w, reportsNamespaces, time.Since(start).Round(time.Millisecond))
	return pods
}

func ptr[T any](v T) *T { return &v }

// parallel runs f(0..n-1) on a few goroutines and fails on the first error.
func parallel(b *testing.B, n int, f func(i int) error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// forwarder is one node's forward process.
type forwarder struct {
	cmd      *exec.Cmd
	findings string
	metrics  string
	want     int
}

// benchForward runs one forwarder per node over its pods' findings and
// returns one result a forwarder wrote, the template of benchReport's.
func benchForward(b *testing.B, c *kubetest.Cluster, bin, kubeconfig string, rec findings.Record, pods []benchPod, nodes int) openreportsv1alpha1.ReportResult {
	dir := b.TempDir()
	fws := make([]*forwarder, nodes)
	for i := range fws {
		port, err := freePort()
		if err != nil {
			b.Fatal(err)
		}
		nd := filepath.Join(dir, fmt.Sprintf("node-%d", i))
		os.MkdirAll(nd, 0o755)
		fw := &forwarder{findings: filepath.Join(nd, "findings.jsonl"), metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
		if err := os.WriteFile(fw.findings, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		log, err := os.Create(filepath.Join(nd, "forward.log"))
		if err != nil {
			b.Fatal(err)
		}
		fw.cmd = exec.Command(bin, "forward", "--findings", fw.findings, "--checkpoint-dir", filepath.Join(nd, "state"),
			"--kubeconfig", kubeconfig, "--node-name", fmt.Sprintf("node-%d", i), "--poll", "100ms",
			"--health-addr", fmt.Sprintf("127.0.0.1:%d", port))
		fw.cmd.Stdout, fw.cmd.Stderr = log, log
		if err := fw.cmd.Start(); err != nil {
			b.Fatal(err)
		}
		log.Close()
		fws[i] = fw
	}
	b.Cleanup(func() {
		for _, fw := range fws {
			if fw != nil {
				fw.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		for _, fw := range fws {
			if fw != nil {
				fw.cmd.Wait()
			}
		}
	})
	// Ready: each forwarder found the CRD and writes Reports.
	waitAll(b, fws, time.Minute, func(m promLines, _ *forwarder) bool {
		return m.sum("iptables_alerter_forward_reports_enabled") == 1
	})
	lines := make([][]byte, nodes)
	for i, p := range pods {
		r := rec
		r.Pod = findings.Pod{Namespace: p.namespace, Name: p.name, UID: string(p.uid)}
		r.Node = fmt.Sprintf("node-%d", p.node)
		r.ContainerID = fmt.Sprintf("%064x", i)
		r.SandboxID = "sb-" + string(p.uid)
		r.Time = time.Now().UTC()
		line, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		lines[p.node] = append(append(lines[p.node], line...), '\n')
		fws[p.node].want++
	}
	api0 := apiRequests(b, c)
	cpu0 := forwardersCPU(b, fws)
	start := time.Now()
	for i, fw := range fws {
		if err := os.WriteFile(fw.findings, lines[i], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	waitAll(b, fws, 10*time.Minute, func(m promLines, fw *forwarder) bool {
		return m.sum("iptables_alerter_forward_reports_total") >= float64(fw.want)
	})
	wall := time.Since(start)
	cpu := forwardersCPU(b, fws) - cpu0
	// The API server counts a request once it answered it: let the last
	// answers' counts land.
	time.Sleep(time.Second)
	api1 := apiRequests(b, c)
	var hwm int64
	written, created := 0.0, 0.0
	for _, fw := range fws {
		m, err := scrape(http.DefaultClient, fw.metrics, "")
		if err != nil {
			b.Fatal(err)
		}
		written += m.sum("iptables_alerter_forward_reports_total", `outcome="written"`)
		created += m.sum("iptables_alerter_forward_findings_total", `outcome="created"`)
		if kb, err := statusKB(fw.cmd.Process.Pid, "VmHWM"); err == nil {
			hwm = max(hwm, kb)
		}
	}
	n := len(pods)
	if int(written) != n || int(created) != n {
		b.Fatalf("forwarders wrote %v Reports results and created %v Events for %d findings", written, created, n)
	}
	fmt.Printf("forward, %d forwarders (one a node), %d findings of %d workloads (each on 2 nodes), load %s:\n",
		nodes, n, *reportsWorkloads, loadavg())
	fmt.Printf("  %d findings in %s (%.0f a second); CPU %s, %s a finding; peak RSS %d KiB (the largest forwarder's)\n",
		n, wall.Round(time.Millisecond), float64(n)/wall.Seconds(), cpu.Round(time.Millisecond),
		(cpu / time.Duration(n)).Round(time.Microsecond), hwm)
	fmt.Printf("  API requests a finding (kube-apiserver's apiserver_request_total):\n")
	delta := api1.minus(api0)
	if got := delta[requestKey{"events", "POST"}]; got != created {
		fmt.Printf("    (the API server counted %.0f Event creates for the forwarders' %.0f: the counts below are short)\n", got, created)
	}
	var total float64
	var beside []requestKey
	for _, k := range delta.keys() {
		if nodeResource[k.resource] {
			beside = append(beside, k)
		}
		if !forwarderResource[k.resource] {
			continue
		}
		total += delta[k]
		fmt.Printf("    %-26s %6.2f  (%.0f)\n", k.resource+" "+k.verb, delta[k]/float64(n), delta[k])
	}
	fmt.Printf("    %-26s %6.2f  (goal <= 1.5 a pod finding; each node's pod LIST and WATCH, made at its start before the count, are not in it)\n", "total", total/float64(n))
	// The node label's PATCH (when its value changes) and the node's
	// ClusterReport (node records only) are the node's, not a pod
	// finding's: shown beside the total.
	for _, k := range beside {
		fmt.Printf("    beside: %-18s %6.2f  (%.0f)\n", k.resource+" "+k.verb, delta[k]/float64(n), delta[k])
	}

	// A forwarder's result, the template of the report's.
	rc := versioned.NewForConfigOrDie(c.Config(c.AdminToken))
	l, err := rc.OpenreportsV1alpha1().Reports(pods[0].namespace).List(context.Background(), metav1.ListOptions{Limit: 1})
	if err != nil || len(l.Items) == 0 || len(l.Items[0].Results) == 0 {
		b.Fatalf("no Report in %s: %v", pods[0].namespace, err)
	}
	return l.Items[0].Results[0]
}

// forwarderResource are the resources the forwarder touches; the API
// server's own (leases, flow control) are left out.
var forwarderResource = map[string]bool{"pods": true, "events": true, "replicasets": true, "statefulsets": true, "daemonsets": true, "reports": true}

// nodeResource are the node's own writes: its label, its ClusterReport.
var nodeResource = map[string]bool{"nodes": true, "clusterreports": true}

// waitAll waits until done holds for the /metrics of every forwarder.
func waitAll(b *testing.B, fws []*forwarder, limit time.Duration, done func(promLines, *forwarder) bool) {
	deadline := time.Now().Add(limit)
	for _, fw := range fws {
		for {
			m, err := scrape(http.DefaultClient, fw.metrics, "")
			if err == nil && done(m, fw) {
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(filepath.Join(filepath.Dir(fw.findings), "forward.log"))
				b.Fatalf("forwarder %s not done after %s (%v); log tail:\n%s", fw.metrics, limit, err, tailOf(log, 2000))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func tailOf(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func forwardersCPU(b *testing.B, fws []*forwarder) time.Duration {
	var total time.Duration
	for _, fw := range fws {
		d, err := cpuOf(fw.cmd.Process.Pid, 100)
		if err != nil {
			b.Fatal(err)
		}
		total += d
	}
	return total
}

// requestKey is a resource and verb of apiserver_request_total.
type requestKey struct{ resource, verb string }

type requestCounts map[requestKey]float64

func (r requestCounts) minus(o requestCounts) requestCounts {
	d := requestCounts{}
	for k, v := range r {
		if v-o[k] > 0 {
			d[k] = v - o[k]
		}
	}
	return d
}

func (r requestCounts) keys() []requestKey {
	var ks []requestKey
	for k := range r {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].resource != ks[j].resource {
			return ks[i].resource < ks[j].resource
		}
		return ks[i].verb < ks[j].verb
	})
	return ks
}

// apiRequests reads the API server's request counters, by resource and verb.
func apiRequests(b *testing.B, c *kubetest.Cluster) requestCounts {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	m, err := scrape(client, c.URL+"/metrics", c.AdminToken)
	if err != nil {
		b.Fatal(err)
	}
	counts := requestCounts{}
	for _, l := range m {
		if !strings.HasPrefix(l, "apiserver_request_total{") {
			continue
		}
		v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		counts[requestKey{label(l, "resource"), label(l, "verb")}] += v
	}
	return counts
}

// apiServing is the API server's time serving LIST reports so far, in
// seconds (the sum of apiserver_request_duration_seconds).
func apiServing(b *testing.B, c *kubetest.Cluster) float64 {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	m, err := scrape(client, c.URL+"/metrics", c.AdminToken)
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, l := range m {
		if strings.HasPrefix(l, "apiserver_request_duration_seconds_sum{") && label(l, "resource") == "reports" && label(l, "verb") == "LIST" {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			sum += v
		}
	}
	return sum
}

// label is the value of name in a sample line's labels.
func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// scrape reads a /metrics page, with a bearer token when one is given.
func scrape(client *http.Client, url, token string) (promLines, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var lines promLines
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := sc.Text(); !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

// benchReport replaces the forwarders' Reports by n Reports of
// MaxResults copies of tmpl, then times the report over them. The
// forwarders' pods are the first results of each namespace's Reports, as
// a forwarder writes them: their Events, which it posted too, are then of
// pods the Reports hold, read (auto reads every namespace's Events: a pod
// whose Report was refused is in them alone) and left out.
func benchReport(b *testing.B, c *kubetest.Cluster, rc versioned.Interface, bin, kubeconfig string, tmpl openreportsv1alpha1.ReportResult, fwd []benchPod, n int) {
	ctx := context.Background()
	for i := 0; i < reportsNamespaces; i++ {
		if err := rc.OpenreportsV1alpha1().Reports(fmt.Sprintf("bench-%d", i)).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: openreports.Selector("")}); err != nil {
			b.Fatal(err)
		}
	}
	byNS := map[string][]benchPod{}
	for _, p := range fwd {
		byNS[p.namespace] = append(byNS[p.namespace], p)
	}
	for ns, ps := range byNS {
		// Each namespace's Reports must hold its forwarder pods, or
		// their Events are of pods no Report holds, read as more
		// workloads than the n counted.
		if room := n / reportsNamespaces * openreports.MaxResults; len(ps) > room {
			b.Fatalf("-reports-objects %d: %s's Reports hold %d pods, fewer than its %d forwarder pods", n, ns, room, len(ps))
		}
	}
	start := time.Now()
	var size int
	parallel(b, n, func(i int) error {
		ns := fmt.Sprintf("bench-%d", i%reportsNamespaces)
		node := fmt.Sprintf("node-%d", i%50)
		r := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("iptables-deployment-big%d-%s", i, node), Namespace: ns,
			Labels: map[string]string{openreports.ManagedByLabel: openreports.ManagedBy, openreports.NodeLabel: node}},
			Source: openreports.Source, Scope: &corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: fmt.Sprintf("big%d", i)}}
		for k := 0; k < openreports.MaxResults; k++ {
			x := tmpl
			x.Properties = make(map[string]string, len(tmpl.Properties))
			for key, v := range tmpl.Properties {
				x.Properties[key] = v
			}
			pod := fmt.Sprintf("big%d-7c9f8-p%03d", i, k)
			uid := fmt.Sprintf("00000000-0000-0000-%04d-%012d", k, i)
			if j := i/reportsNamespaces*openreports.MaxResults + k; j < len(byNS[ns]) {
				pod, uid = byNS[ns][j].name, string(byNS[ns][j].uid)
			}
			x.Subjects = []corev1.ObjectReference{{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: pod, UID: types.UID(uid)}}
			x.Properties[openreports.PropPodUID], x.Properties[openreports.PropPods] = uid, pod
			x.Properties[openreports.PropOwner], x.Properties[openreports.PropNodes] = fmt.Sprintf("Deployment/big%d", i), node
			r.Results = append(r.Results, x)
		}
		r.Summary.Fail = len(r.Results)
		if i == 0 {
			data, _ := json.Marshal(r)
			size = len(data)
		}
		_, err := rc.OpenreportsV1alpha1().Reports(ns).Create(ctx, r, metav1.CreateOptions{})
		return err
	})
	created := time.Since(start)
	settled := settle(time.Minute)
	fmt.Printf("report over %d Reports of %d results (%d pods; %d KiB a Report), created in %s, settled in %s; load %s:\n",
		n, openreports.MaxResults, n*openreports.MaxResults, size>>10, created.Round(time.Millisecond), settled.Round(time.Second), loadavg())
	// Each run's CPU differs by a tenth or more on this machine (the API
	// server serves the pages on the same cores); the median of a few
	// runs is the figure.
	if *reportsRuns < 1 {
		b.Fatalf("-reports-runs %d: want at least one run", *reportsRuns)
	}
	var runs []reportRun
	var serving float64
	for i := 0; i < *reportsRuns; i++ {
		serving0 := apiServing(b, c)
		r := reportOnce(b, bin, kubeconfig, n)
		serving += apiServing(b, c) - serving0
		fmt.Printf("  run %d: %.2f s wall, peak RSS %d KiB, CPU %.2f s (user %.2f, sys %.2f)\n", i+1, r.secs, r.kb, r.user+r.sys, r.user, r.sys)
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].user+runs[i].sys < runs[j].user+runs[j].sys })
	med, peak := runs[len(runs)/2], 0
	for _, r := range runs {
		peak = max(peak, r.kb)
	}
	fmt.Printf("  iptables-alerter report (text, all namespaces), median of %d runs by CPU: %.2f s wall; peak RSS %d KiB at most\n", len(runs), med.secs, peak)
	fmt.Printf("  its CPU %.2f s (user %.2f, sys %.2f)  (goal <= 1.5 s, peak RSS <= 150 MB)\n", med.user+med.sys, med.user, med.sys)
	fmt.Printf("  the API server's serving time of its list pages: %.2f s a run (apiserver_request_duration_seconds_sum of LIST reports)\n", serving/float64(len(runs)))
}

// reportRun is one run of the report under GNU time.
type reportRun struct {
	secs, user, sys float64
	kb              int
}

// reportOnce runs `iptables-alerter report` over the cluster's n Reports
// and checks that it read them all.
func reportOnce(b *testing.B, bin, kubeconfig string, n int) reportRun {
	out, err := os.Create(filepath.Join(b.TempDir(), "report.txt"))
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	var stderr bytes.Buffer
	// The API server, not the report, takes most of the time: on a loaded
	// machine serving the pages took over report's 2-minute default.
	cmd := exec.Command("/usr/bin/time", "-f", "%e %M %U %S", bin, "report", "--kubeconfig", kubeconfig, "--timeout", "15m")
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("report: %v: %s", err, tailOf(stderr.Bytes(), 2000))
	}
	f := strings.Fields(string(stderr.Bytes()[bytes.LastIndexByte(bytes.TrimSpace(stderr.Bytes()), '\n')+1:]))
	if len(f) != 4 {
		b.Fatalf("GNU time said %q", stderr.String())
	}
	var r reportRun
	r.secs, _ = strconv.ParseFloat(f[0], 64)
	r.kb, _ = strconv.Atoi(f[1])
	r.user, _ = strconv.ParseFloat(f[2], 64)
	r.sys, _ = strconv.ParseFloat(f[3], 64)
	text, err := os.ReadFile(out.Name())
	if err != nil {
		b.Fatal(err)
	}
	head, _, _ := strings.Cut(string(text), "\n")
	if !strings.HasSuffix(head, "from reports.") {
		b.Fatalf("report header %q: not read from the Reports", head)
	}
	// Every page read: one workload a Report.
	if !strings.Contains(string(text), fmt.Sprintf("\n%d workloads using iptables", n)) {
		b.Fatalf("report did not count %d workloads:\n%s", n, tailOf(text, 2000))
	}
	return r
}

// settle waits until the machine's CPUs are busy less than a tenth of the
// time over a second (/proc/stat), at most limit: after 1,000 creates the API server
// and etcd go on working for a while (the watch cache, compaction, their
// heaps), and a report run meanwhile pays for it in its own CPU (cache
// misses, preemptions, slower page faults), which is not what an admin
// running it on a settled cluster sees.
func settle(limit time.Duration) time.Duration {
	busy := func() (busy, total uint64) {
		data, _ := os.ReadFile("/proc/stat")
		line, _, _ := strings.Cut(string(data), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseUint(f, 10, 64)
			total += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
		return busy, total
	}
	start := time.Now()
	for time.Since(start) < limit {
		b0, t0 := busy()
		time.Sleep(time.Second)
		b1, t1 := busy()
		if t1 > t0 && float64(b1-b0)/float64(t1-t0) < 0.1 {
			break
		}
	}
	return time.Since(start)
}

// kubeVersion is the API server's version, from build-kube.sh's stamp.
func kubeVersion() string {
	data, err := os.ReadFile(kubetest.APIServerPath() + ".version")
	if err != nil {
		return "(version unknown)"
	}
	return strings.TrimSpace(string(data))
}
