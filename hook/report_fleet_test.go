//go:build !hookonly && !agentonly

package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/schematest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// fleetCluster starts a kube-apiserver serving the Report CRD with one
// Report of ours, written by the real writer: pod's workload in shop at
// the level of im.
func fleetCluster(t *testing.T, pod string, im findings.Impact) *kubetest.Cluster {
	t.Helper()
	c, cs, rc, owned := reportsCluster(t)
	p := owned[pod].Pod
	rec := fwdRecord(p, string(p.UID), "fp-"+pod, "app")
	rec.State, rec.Impact, rec.Worst = findings.StatePresent, im, im.Worst()
	if res, err := openreports.New(cs, rc, "node-a").Write(kubetest.Ctx(t), rec); err != nil || res.Outcome != openreports.Written {
		t.Fatalf("write %s: %+v, %v", pod, res, err)
	}
	return c
}

// fleetKubeconfig writes one kubeconfig with a context per cluster (as
// `kubectl config` merges them) and a context "down" whose server
// listens nowhere.
func fleetKubeconfig(t *testing.T, clusters map[string]*kubetest.Cluster) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	var ca string
	for name, c := range clusters {
		cfg.Clusters[name] = &clientcmdapi.Cluster{Server: c.URL, CertificateAuthority: c.CAFile}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: c.AdminToken}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		cfg.CurrentContext, ca = name, c.CAFile
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	cfg.Clusters["down"] = &clientcmdapi.Cluster{Server: "https://" + closed, CertificateAuthority: ca}
	cfg.AuthInfos["down"] = &clientcmdapi.AuthInfo{Token: "unused"}
	cfg.Contexts["down"] = &clientcmdapi.Context{Cluster: "down", AuthInfo: "down"}
	path := filepath.Join(t.TempDir(), "fleet.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

type fleetJSON struct {
	Clusters []struct {
		Name   string `json:"name"`
		Groups int    `json:"groups"`
		Error  string `json:"error"`
		Origin struct {
			Cluster string `json:"cluster"`
			Context string `json:"context"`
		} `json:"origin"`
	} `json:"clusters"`
	Groups []struct {
		Cluster string `json:"cluster"`
		Owner   struct{ Kind, Name string }
		Worst   string `json:"worst"`
	} `json:"groups"`
	Failing bool `json:"failing"`
}

// TestReportFleet is issue 27 item 6's fleet on two real kube-apiservers
// holding different Reports: --context repeated reads both into one
// report whose groups name their cluster, in every format; --all-contexts
// reads every context of the kubeconfig, where one whose server does not
// answer is named with its error while the two others are still
// reported, and the exit status is 2, never the 0 of a clean report.
func TestReportFleet(t *testing.T) {
	east := fleetCluster(t, "web-7c9-aaaaa", findings.Impact{Legacy: 1})
	west := fleetCluster(t, "db-0", findings.Impact{Xt: 2})
	kc := fleetKubeconfig(t, map[string]*kubetest.Cluster{"east": east, "west": west})

	readJSON := func(wantCode int, args ...string) (fleetJSON, string) {
		t.Helper()
		code, out, stderr := runCmd(t, append([]string{"report", "--kubeconfig", kc, "-o", "json"}, args...)...)
		if code != wantCode {
			t.Fatalf("report %v: exit %d, want %d: %s", args, code, wantCode, stderr)
		}
		schematest.Validate(t, schematest.Report, []byte(out))
		var r fleetJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("report %v: %v\n%s", args, err, out)
		}
		return r, stderr
	}
	groups := func(r fleetJSON) string {
		var gs []string
		for _, g := range r.Groups {
			gs = append(gs, g.Cluster+":"+g.Owner.Kind+"/"+g.Owner.Name+":"+g.Worst)
		}
		return strings.Join(gs, " ")
	}
	const both = "east:Deployment/web:legacy west:StatefulSet/db:xt"

	r, _ := readJSON(0, "--context", "east", "--context", "west")
	if got := groups(r); got != both {
		t.Errorf("--context east --context west: groups %s, want %s", got, both)
	}
	if len(r.Clusters) != 2 || r.Clusters[0].Name != "east" || r.Clusters[0].Origin.Cluster != east.URL || r.Clusters[0].Groups != 1 ||
		r.Clusters[1].Name != "west" || r.Clusters[1].Origin.Cluster != west.URL || r.Clusters[0].Error+r.Clusters[1].Error != "" {
		t.Errorf("clusters %+v, want east at %s and west at %s, both read", r.Clusters, east.URL, west.URL)
	}
	// One --context is the one-cluster report it was: no cluster column.
	if r, _ := readJSON(0, "--context", "west"); groups(r) != ":StatefulSet/db:xt" || len(r.Clusters) != 0 {
		t.Errorf("--context west: groups %s, clusters %+v", groups(r), r.Clusters)
	}
	// The CI gate judges every cluster's workloads.
	if code, _, stderr := runCmd(t, "report", "--kubeconfig", kc, "--context", "east", "--context", "west", "--fail-on", "breaks"); code != 1 {
		t.Errorf("--fail-on breaks over both: exit %d, want 1: %s", code, stderr)
	}

	// Every context: down does not answer, the two others are reported.
	r, stderr := readJSON(2, "--all-contexts")
	if got := groups(r); got != both {
		t.Errorf("--all-contexts: groups %s, want %s", got, both)
	}
	var down []string
	for _, c := range r.Clusters {
		if c.Error != "" {
			down = append(down, c.Name)
		}
	}
	if len(r.Clusters) != 3 || strings.Join(down, ",") != "down" || !strings.Contains(r.Clusters[0].Error, "connect") {
		t.Errorf("--all-contexts: clusters %+v, want down (its connection refused) not read", r.Clusters)
	}
	if !strings.Contains(stderr, "context down:") || !strings.Contains(stderr, "1 of 3 clusters could not be read") {
		t.Errorf("--all-contexts: stderr does not name the cluster not read:\n%s", stderr)
	}
	// Not even --fail-on never makes it clean.
	if code, _, _ := runCmd(t, "report", "--kubeconfig", kc, "--all-contexts", "--fail-on", "never"); code != 2 {
		t.Errorf("--all-contexts --fail-on never with a cluster down: exit %d, want 2", code)
	}

	// The cluster column and the cluster not read, in every other format.
	for format, want := range map[string][]string{
		"text":     {"CLUSTER", "down: NOT READ", "Not complete: 1 of 3 clusters could not be read (down)"},
		"markdown": {"| STATUS | CLUSTER | NAMESPACE |", "| east | shop | Deployment/web |", "| west | shop | StatefulSet/db |", "- down: NOT READ"},
		"html":     {"<th>CLUSTER</th>", "<td>east</td>", "<td>west</td>", `id="clusters"`, "down: NOT READ"},
		"junit":    {`classname="east/shop"`, `classname="west/shop"`, `type="ClusterNotRead"`, `errors="1"`},
	} {
		code, out, _ := runCmd(t, "report", "--kubeconfig", kc, "--all-contexts", "-o", format)
		if code != 2 {
			t.Errorf("-o %s: exit %d, want 2", format, code)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("-o %s: no %q in:\n%s", format, w, out)
			}
		}
	}
	code, out, _ := runCmd(t, "report", "--kubeconfig", kc, "--all-contexts")
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && (f[1] == "east" || f[1] == "west") {
			rows = append(rows, f[1]+":"+f[3]+":"+f[4])
		}
	}
	if code != 2 || strings.Join(rows, " ") != "east:Deployment/web:legacy west:StatefulSet/db:xt" {
		t.Errorf("text rows %v (exit %d), want east's web and west's db:\n%s", rows, code, out)
	}

	// Usage errors: exit 2, nothing read.
	files := filepath.Join(t.TempDir(), "findings.jsonl")
	if err := os.WriteFile(files, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--all-contexts", "--context", "east"},
		{"--context", "east", "--context", "east"},
		{"--all-contexts", "--by", "node"},
		{"--context", "east", "--context", "west", files},
		{"--context", "east", "--context", "nowhere"},
	} {
		code, out, stderr := runCmd(t, append([]string{"report", "--kubeconfig", kc}, args...)...)
		if code != 2 || stderr == "" {
			t.Errorf("report %v: exit %d, stderr %q, want 2 and why", args, code, stderr)
		}
		if args[len(args)-1] == "nowhere" && (!strings.Contains(out, "nowhere: NOT READ") || !strings.Contains(out, "Deployment/web")) {
			t.Errorf("report %v: an unknown context is not named as not read beside east's report:\n%s", args, out)
		}
	}
}
