package textfiletest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/textfile"
)

const (
	nodeExporter = "/usr/bin/prometheus-node-exporter"
	promtool     = "/usr/bin/promtool"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "iptables-alerter-textfile")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "iptables-alerter")
	if err := testbin.Build(bin, ""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needTools(t *testing.T) {
	t.Helper()
	for _, p := range []string{nodeExporter, promtool} {
		_, err := os.Stat(p)
		nstest.Need(t, err == nil, p+" (apt-get install prometheus-node-exporter prometheus)")
	}
}

// startNodeExporter runs the real exporter with only the textfile collector,
// reading dir, on a free loopback port; it returns the /metrics URL.
func startNodeExporter(t *testing.T, dir string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a tiny race with another process taking the port; the wait below reports it
	cmd := exec.Command(nodeExporter, "--collector.disable-defaults", "--collector.textfile",
		"--collector.textfile.directory="+dir, "--web.listen-address="+addr)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node-exporter: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("node-exporter log:\n%s", logs.String())
		}
	})
	url := "http://" + addr + "/metrics"
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-exporter on %s never answered: %v\n%s", addr, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape returns every sample as `name{labels}` → value, labels sorted.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			out[key(name, m)] = value(m)
		}
	}
	return out
}

func key(name string, m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	return name + "{" + strings.Join(ls, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// ours keeps our series and the collector's error gauge.
func ours(all map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range all {
		if strings.HasPrefix(k, "iptables_alerter_") || strings.HasPrefix(k, "node_textfile_scrape_error") {
			out[k] = v
		}
	}
	return out
}

type dirs struct{ findings, state, text string }

func newDirs(t *testing.T) dirs {
	d := t.TempDir()
	ds := dirs{findings: filepath.Join(d, "log", "findings.jsonl"), state: filepath.Join(d, "state"), text: filepath.Join(d, "textfile")}
	for _, p := range []string{filepath.Dir(ds.findings), ds.text} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// node-exporter runs as root here, but keep the directory readable as
	// it would be for the Debian "prometheus" user.
	if err := os.Chmod(filepath.Dir(ds.text), 0o755); err != nil {
		t.Fatal(err)
	}
	return ds
}

// appendFinding writes a record exactly as the hook does.
func appendFinding(t *testing.T, path, ns, name, uid, netnsPath string, nft, legacy int) {
	t.Helper()
	r := findings.Record{Time: findings.Now(), Node: "node-1", Source: "hook", Stage: "poststart", ContainerID: "cid-" + uid,
		Pod: findings.Pod{Namespace: ns, Name: name, UID: uid}, Netns: netnsPath, Fingerprint: "fp-" + uid}
	r.Nft.Rules, r.Legacy.Rules = nft, legacy
	if nft > 0 {
		r.Nft.Tables = []string{"ip filter"}
	}
	if legacy > 0 {
		r.Legacy.Tables = []string{"ip nat"}
	}
	if err := (findings.Log{Path: path}).Append(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func appendRaw(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func runOnce(t *testing.T, d dirs) {
	t.Helper()
	out, err := exec.Command(bin, "textfile", "--once", "--findings", d.findings, "--checkpoint-dir", d.state, "--textfile-dir", d.text).CombinedOutput()
	if err != nil {
		t.Fatalf("textfile --once: %v\n%s", err, out)
	}
}

// libraryOnce does the same in-process through lib/textfile.
func libraryOnce(t *testing.T, d dirs) {
	t.Helper()
	c, err := textfile.Open(d.state, d.text)
	if err != nil {
		t.Fatal(err)
	}
	f := c.Follower(d.findings)
	if err := f.Once(context.Background(), c.Handle); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
}

func checkMetrics(t *testing.T, d dirs) {
	t.Helper()
	f, err := os.Open(filepath.Join(d.text, textfile.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = f
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestNodeExporterScrapesTextfile(t *testing.T) {
	needTools(t)
	for _, run := range []struct {
		name string
		once func(*testing.T, dirs)
	}{{"binary", runOnce}, {"library", libraryOnce}} {
		t.Run(run.name, func(t *testing.T) {
			d := newDirs(t)
			live, leaving := nstest.New(t), nstest.New(t)
			appendFinding(t, d.findings, "team-a", "web-1", "uid-live", live.Path(), 3, 0)
			appendFinding(t, d.findings, "team-b", "batch-7", "uid-leaving", leaving.Path(), 1, 2)
			appendFinding(t, d.findings, "team-c", "gone-1", "uid-gone", "/run/netns/iptalert-tf-never-existed", 5, 0)
			// No usage, no state: an inspection that could not finish.
			appendFinding(t, d.findings, "team-d", "hider", "uid-hider", live.Path(), 0, 0)
			appendRaw(t, d.findings, "this is not a finding\n")
			run.once(t, d)
			url := startNodeExporter(t, d.text)

			got := ours(scrape(t, url))
			last := got["iptables_alerter_last_finding_timestamp_seconds{}"]
			if time.Since(time.UnixMilli(int64(last*1000))) > time.Minute {
				t.Errorf("last finding timestamp %v is not recent", last)
			}
			delete(got, "iptables_alerter_last_finding_timestamp_seconds{}")
			want := map[string]float64{
				"iptables_alerter_pod_iptables_rules{backend=nft,pod_name=web-1,pod_namespace=team-a}":      3,
				"iptables_alerter_pod_iptables_rules{backend=legacy,pod_name=web-1,pod_namespace=team-a}":   0,
				"iptables_alerter_pod_iptables_rules{backend=nft,pod_name=batch-7,pod_namespace=team-b}":    1,
				"iptables_alerter_pod_iptables_rules{backend=legacy,pod_name=batch-7,pod_namespace=team-b}": 2,
				// Unclassified findings: only legacy rules have a level.
				"iptables_alerter_pod_rules_by_impact{impact=legacy,pod_name=web-1,pod_namespace=team-a}":   0,
				"iptables_alerter_pod_rules_by_impact{impact=xt,pod_name=web-1,pod_namespace=team-a}":       0,
				"iptables_alerter_pod_rules_by_impact{impact=native,pod_name=web-1,pod_namespace=team-a}":   0,
				"iptables_alerter_pod_rules_by_impact{impact=legacy,pod_name=batch-7,pod_namespace=team-b}": 2,
				"iptables_alerter_pod_rules_by_impact{impact=xt,pod_name=batch-7,pod_namespace=team-b}":     0,
				"iptables_alerter_pod_rules_by_impact{impact=native,pod_name=batch-7,pod_namespace=team-b}": 0,
				"iptables_alerter_flagged_pods_by_impact{impact=legacy,vendor=unknown}":                     1,
				"iptables_alerter_pod_usage_unknown{pod_name=hider,pod_namespace=team-d}":                   1,
				"iptables_alerter_flagged_pods{}":          2,
				"iptables_alerter_findings_total{}":        4,
				"iptables_alerter_malformed_lines_total{}": 1,
				"node_textfile_scrape_error{}":             0,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("scraped series (-want +got):\n%s", diff)
			}
			checkMetrics(t, d)
			b, _ := os.ReadFile(filepath.Join(d.text, textfile.FileName))
			for _, secret := range []string{"uid-", "cid-", "/run/netns"} {
				if strings.Contains(string(b), secret) {
					t.Errorf("textfile leaks %q:\n%s", secret, b)
				}
			}

			// The pod leaves the node: its netns goes, the next run drops
			// it; the counters survive the restart and count on.
			leaving.Delete()
			appendFinding(t, d.findings, "team-a", "web-1", "uid-live", live.Path(), 4, 0)
			run.once(t, d)
			got = ours(scrape(t, url))
			delete(got, "iptables_alerter_last_finding_timestamp_seconds{}")
			want = map[string]float64{
				"iptables_alerter_pod_iptables_rules{backend=nft,pod_name=web-1,pod_namespace=team-a}":    4,
				"iptables_alerter_pod_iptables_rules{backend=legacy,pod_name=web-1,pod_namespace=team-a}": 0,
				"iptables_alerter_pod_rules_by_impact{impact=legacy,pod_name=web-1,pod_namespace=team-a}": 0,
				"iptables_alerter_pod_rules_by_impact{impact=xt,pod_name=web-1,pod_namespace=team-a}":     0,
				"iptables_alerter_pod_rules_by_impact{impact=native,pod_name=web-1,pod_namespace=team-a}": 0,
				"iptables_alerter_pod_usage_unknown{pod_name=hider,pod_namespace=team-d}":                 1,
				"iptables_alerter_flagged_pods{}":          1,
				"iptables_alerter_findings_total{}":        5,
				"iptables_alerter_malformed_lines_total{}": 1,
				"node_textfile_scrape_error{}":             0,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("after the pod left (-want +got):\n%s", diff)
			}
			checkMetrics(t, d)
		})
	}
}

// TestNodeExporterWhileFollowing scrapes while the daemon follows the file
// through a rotation done by the real appender.
func TestNodeExporterWhileFollowing(t *testing.T) {
	needTools(t)
	d := newDirs(t)
	live := nstest.New(t)
	cmd := exec.Command(bin, "textfile", "--findings", d.findings, "--checkpoint-dir", d.state, "--textfile-dir", d.text, "--poll", "20ms")
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	url := startNodeExporter(t, d.text)
	// Every line rotates the file. Two lines at a time means the follower
	// finds one line in findings.jsonl.1 and one in the new file, and must
	// finish the rotated one first; a third line would destroy .1, which is
	// data loss by design, so the test waits before writing on.
	small := findings.Log{Path: d.findings, MaxBytes: 300}
	for i := range 10 {
		r := findings.Record{Time: findings.Now(), Pod: findings.Pod{Namespace: "team-a", Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("u%d", i)}, Netns: live.Path(), Fingerprint: "fp"}
		r.Nft.Rules, r.Nft.Tables = i+1, []string{"ip filter"}
		if err := small.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			continue
		}
		if _, err := os.Stat(d.findings + ".1"); err != nil {
			t.Fatalf("the appender did not rotate: %v", err)
		}
		want := float64(i + 1)
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := scrape(t, url)
			if got["iptables_alerter_findings_total{}"] == want {
				if got["iptables_alerter_flagged_pods{}"] != want || got["node_textfile_scrape_error{}"] != 0 {
					t.Errorf("flagged %v, scrape error %v; want %v, 0", got["iptables_alerter_flagged_pods{}"], got["node_textfile_scrape_error{}"], want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("findings_total = %v after 10s, want %v\n%s", got["iptables_alerter_findings_total{}"], want, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	_ = cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGINT: %v\n%s", err, logs.String())
	}
	checkMetrics(t, d)
}
