//go:build !hookonly && !agentonly

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/report"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// junitXSD is the JUnit XML shape CI systems read (Jenkins' and Ant's):
// testsuites, testsuite with properties, testcase with at most one of
// skipped, error or failure, each with message and type, and system-out.
const junitXSD = `<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" elementFormDefault="qualified">
  <xs:complexType name="result">
    <xs:simpleContent>
      <xs:extension base="xs:string">
        <xs:attribute name="message" type="xs:string"/>
        <xs:attribute name="type" type="xs:string"/>
      </xs:extension>
    </xs:simpleContent>
  </xs:complexType>
  <xs:element name="testsuites">
    <xs:complexType>
      <xs:sequence>
        <xs:element ref="testsuite" minOccurs="0" maxOccurs="unbounded"/>
      </xs:sequence>
      <xs:attribute name="name" type="xs:string"/>
      <xs:attribute name="tests" type="xs:nonNegativeInteger"/>
      <xs:attribute name="failures" type="xs:nonNegativeInteger"/>
      <xs:attribute name="errors" type="xs:nonNegativeInteger"/>
      <xs:attribute name="skipped" type="xs:nonNegativeInteger"/>
      <xs:attribute name="time" type="xs:decimal"/>
    </xs:complexType>
  </xs:element>
  <xs:element name="testsuite">
    <xs:complexType>
      <xs:sequence>
        <xs:element name="properties" minOccurs="0">
          <xs:complexType>
            <xs:sequence>
              <xs:element name="property" minOccurs="0" maxOccurs="unbounded">
                <xs:complexType>
                  <xs:attribute name="name" type="xs:string" use="required"/>
                  <xs:attribute name="value" type="xs:string" use="required"/>
                </xs:complexType>
              </xs:element>
            </xs:sequence>
          </xs:complexType>
        </xs:element>
        <xs:element name="testcase" minOccurs="0" maxOccurs="unbounded">
          <xs:complexType>
            <xs:sequence>
              <xs:choice minOccurs="0">
                <xs:element name="skipped" type="result"/>
                <xs:element name="error" type="result"/>
                <xs:element name="failure" type="result"/>
              </xs:choice>
              <xs:element name="system-out" type="xs:string" minOccurs="0"/>
              <xs:element name="system-err" type="xs:string" minOccurs="0"/>
            </xs:sequence>
            <xs:attribute name="name" type="xs:string" use="required"/>
            <xs:attribute name="classname" type="xs:string" use="required"/>
            <xs:attribute name="time" type="xs:decimal"/>
          </xs:complexType>
        </xs:element>
        <xs:element name="system-out" type="xs:string" minOccurs="0"/>
        <xs:element name="system-err" type="xs:string" minOccurs="0"/>
      </xs:sequence>
      <xs:attribute name="name" type="xs:string" use="required"/>
      <xs:attribute name="tests" type="xs:nonNegativeInteger" use="required"/>
      <xs:attribute name="failures" type="xs:nonNegativeInteger"/>
      <xs:attribute name="errors" type="xs:nonNegativeInteger"/>
      <xs:attribute name="skipped" type="xs:nonNegativeInteger"/>
      <xs:attribute name="time" type="xs:decimal"/>
      <xs:attribute name="timestamp" type="xs:dateTime"/>
    </xs:complexType>
  </xs:element>
</xs:schema>
`

// runReportCmd runs the report command in-process.
func runReportCmd(t *testing.T, args ...string) (stdout string, code int) {
	t.Helper()
	code, stdout, stderr := runCmd(t, append([]string{"report"}, args...)...)
	if stderr != "" {
		t.Logf("report %v stderr: %s", args, stderr)
	}
	return stdout, code
}

// groupsOf decodes a JSON report to "Kind/name pods=.. nodes=.." lines,
// sorted, with the worst level where asked.
func groupsOf(t *testing.T, out string) (lines []string, r report.Report) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report output is not JSON: %v\n%s", err, out)
	}
	for _, g := range r.Groups {
		lines = append(lines, fmt.Sprintf("%s/%s pods=%s nodes=%s", g.Namespace, g.Owner, strings.Join(g.Pods, ","), strings.Join(g.Nodes, ",")))
	}
	sort.Strings(lines)
	return lines, r
}

// TestReportOwnersAndCI is issue 10's end-to-end path on real parts: pods
// of every controller kind made through a real kube-apiserver, findings
// written by the real hook from rules the real iptables clients put in
// real network namespaces, Events posted by the real forwarder (one per
// node), then `report` from the cluster, from a saved events JSON and from
// the findings files: the same workloads, pods and nodes every way.
func TestReportOwnersAndCI(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore", "iptables-legacy")
	_, err := exec.LookPath("xmllint")
	nstest.Need(t, err == nil, "xmllint (Debian libxml2-utils)")
	e := newFwdEnv(t)
	kubetest.Apply(t, e.cs, "../packaging/rbac/report.yaml")
	kubetest.Namespace(t, e.cs, "shop")
	pods := kubetest.Workloads(t, e.cs, "shop")
	reportKC := e.c.Kubeconfig("report", kubetest.Token(t, e.cs, fwdNS, "iptables-alerter-report"))

	// Two real rulesets: a mesh's nat redirect written by iptables-nft,
	// and a legacy x_tables filter rule.
	mesh := nstest.New(t)
	mesh.Restore(nstest.IstioNAT, "iptables-nft-restore")
	legacy := nstest.New(t)
	legacy.Run("iptables-legacy", "-A", "INPUT", "-p", "tcp", "--dport", "5432", "-j", "ACCEPT")

	dir := t.TempDir()
	file := func(node string) string { return filepath.Join(dir, node, "findings.jsonl") }
	var all []*corev1.Pod
	want := map[string][]string{} // owner: pods
	for name, o := range pods {
		netns, uid := mesh, string(o.Pod.UID)
		if o.Kind == "StatefulSet" || o.Kind == "StaticPod" {
			netns = legacy
		}
		if o.Kind == "StaticPod" {
			// The kubelet labels a static pod's containers with its config hash.
			uid = o.Pod.Annotations["kubernetes.io/config.mirror"]
		}
		node := o.Pod.Spec.NodeName
		h := hookRun{findings: file(node), stateDir: filepath.Join(dir, node, "hook-state")}
		st := pod{netns: netns.Path(), sandbox: "sb-" + name, container: "c-" + name, extraAnn: map[string]string{
			"io.kubernetes.pod.namespace": "shop", "io.kubernetes.pod.name": name, "io.kubernetes.pod.uid": uid}}.state(t)
		runHookProc(t, st, &h, "--node", node)
		all = append(all, o.Pod)
		want[o.Kind+"/"+o.Owner] = append(want[o.Kind+"/"+o.Owner], name)
	}

	addr := nstest.FreeAddr(t)
	fa := e.start(t, "--findings", file("node-a"), "--state-dir", filepath.Join(dir, "fwd-a"), "--node-name", "node-a", "--health-addr", addr)
	fb := e.start(t, "--findings", file("node-b"), "--state-dir", filepath.Join(dir, "fwd-b"), "--node-name", "node-b")
	e.waitDelivered(t, 60*time.Second, all, 1)
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// node-a holds two legacy pods (db-0, the static etcd-node-a) and four
	// of the Istio-shaped ruleset.
	for _, want := range []string{`iptables_alerter_forward_events_by_impact_total{impact="legacy",vendor="unknown"} 2`,
		`iptables_alerter_forward_events_by_impact_total{impact="xt",vendor="istio"} 4`} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	fa.stop(t, syscall.SIGTERM)
	fb.stop(t, syscall.SIGTERM)

	// The Event note names the owner and leads with the impact.
	db := pods["db-0"].Pod
	if evs := e.podEvents(t, db); len(evs) != 1 || !strings.HasPrefix(evs[0].Message, findings.ImpactWords(findings.ImpactLegacy)+". Owner: StatefulSet shop/db.") {
		t.Errorf("db-0 events %+v", evs)
	}

	saved := saveEvents(t, e.cs, dir)

	var wantLines []string
	for o, ps := range want {
		sort.Strings(ps)
		var nodes []string
		for _, p := range ps {
			nodes = append(nodes, pods[p].Pod.Spec.NodeName)
		}
		sort.Strings(nodes)
		nodes = compactStrings(nodes)
		wantLines = append(wantLines, fmt.Sprintf("shop/%s pods=%s nodes=%s", o, strings.Join(ps, ","), strings.Join(nodes, ",")))
	}
	sort.Strings(wantLines)
	for name, args := range map[string][]string{
		"cluster events":              {"--kubeconfig", reportKC},
		"saved events":                {"--events", saved},
		"findings files with cluster": {"--kubeconfig", reportKC, file("node-a"), file("node-b")},
	} {
		out, code := runReportCmd(t, append(args, "--format", "json")...)
		got, r := groupsOf(t, out)
		if code != 0 {
			t.Errorf("%s: exit %d in warn mode", name, code)
		}
		if d := cmp.Diff(wantLines, got); d != "" {
			t.Errorf("%s: groups (-want +got):\n%s", name, d)
		}
		// The legacy rule is legacy; the mesh ruleset holds -m owner, an xt
		// match, and is Istio's shape, with its hint.
		for _, g := range r.Groups {
			want, vendor := findings.ImpactXt, "istio"
			if g.Owner.Kind == "StatefulSet" || g.Owner.Kind == "StaticPod" {
				want, vendor = findings.ImpactLegacy, findings.VendorUnknown
			}
			if hint, _ := g.Hint(); g.Worst != want || g.VendorNames() != vendor || (vendor == "istio") != (hint != "") {
				t.Errorf("%s: %s worst %q vendor %q hint %q, want %q, %q", name, g.Owner, g.Worst, g.VendorNames(), hint, want, vendor)
			}
		}
	}
	// The text format fits a terminal: every line within report.TextWidth,
	// the mesh's hint and an xt (breaking) rule first under its row.
	text, _ := runReportCmd(t, "--kubeconfig", reportKC)
	for _, l := range strings.Split(text, "\n") {
		if n := len([]rune(l)); n > report.TextWidth {
			t.Errorf("text report line of %d columns: %q", n, l)
		}
	}
	if _, web, ok := strings.Cut(text, "Deployment/web"); !ok || !strings.Contains(web, "\n    hint:     Istio") ||
		!strings.Contains(web, "\n    rule:     [ip nat, xt] ") || strings.Index(web, "rule:     [ip nat, xt]") > strings.Index(web, "rule:") {
		t.Errorf("text report: no Deployment/web row with its hint and an xt rule first:\n%s", text)
	}

	// Without a cluster a finding's owner is its pod, never a guess.
	out, _ := runReportCmd(t, "--format", "json", file("node-a"), file("node-b"))
	got, _ := groupsOf(t, out)
	if len(got) != len(pods) || !strings.HasPrefix(got[0], "shop/Pod/") || !strings.HasPrefix(got[len(got)-1], "shop/Pod/") {
		t.Errorf("offline groups: %v", got)
	}

	// Expectations silence exactly what they name, and the exit status
	// follows --fail-on. A rule covers only the rules it matches: the
	// agent's examples show one of its five xt rules, so a rule matching
	// its Istio jumps cannot cover its xt level, while level: xt covers
	// web's.
	some := filepath.Join(dir, "some.yaml")
	os.WriteFile(some, []byte(`expected:
- owner: Deployment/web
  vendor: istio
  level: xt
  reason: mesh sidecar, moves to native nftables with the mesh upgrade
- owner: StatefulSet/db
  reason: db firewall, rewritten in Q3
- owner: DaemonSet/agent
  ruleRegexp: "-j ISTIO_[A-Z]+"
  reason: matches example rules, but not every xt rule is shown, so silences nothing
`), 0o644)
	allButStatic := filepath.Join(dir, "all-but-static.yaml")
	os.WriteFile(allButStatic, []byte("expected:\n- owner: '[A-RT-Z]*/*'\n  reason: all but S...\n- owner: 'Stat[^i]*/*'\n  reason: StatefulSet, not StaticPod\n"), 0o644)
	everything := filepath.Join(dir, "all.yaml")
	os.WriteFile(everything, []byte("expected:\n- namespace: shop\n  reason: the whole test namespace\n"), 0o644)
	for _, tc := range []struct {
		exp, failOn string
		code        int
		failing     []string
	}{
		{some, "never", 0, nil},
		{some, "unexpected", 1, []string{"CronJob/nightly", "DaemonSet/agent", "Job/once", "Pod/debug", "ReplicaSet/lone", "StaticPod/etcd-node-a"}},
		{allButStatic, "breaks", 1, []string{"StaticPod/etcd-node-a"}},
		{everything, "unexpected", 0, nil},
		{everything, "breaks", 0, nil},
	} {
		out, code := runReportCmd(t, "--kubeconfig", reportKC, "--format", "json", "--expectations", tc.exp, "--fail-on", tc.failOn)
		_, r := groupsOf(t, out)
		var failing, expected []string
		for _, g := range r.Groups {
			if g.Fails {
				failing = append(failing, g.Owner.String())
			}
			if g.Expected {
				expected = append(expected, g.Owner.String())
			}
		}
		sort.Strings(failing)
		if code != tc.code || !cmp.Equal(failing, tc.failing, cmp.Comparer(func(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") })) {
			t.Errorf("%s --fail-on %s: exit %d, failing %v; want %d, %v", filepath.Base(tc.exp), tc.failOn, code, failing, tc.code, tc.failing)
		}
		if tc.exp == some && strings.Join(expected, ",") != "StatefulSet/db,Deployment/web" && strings.Join(expected, ",") != "Deployment/web,StatefulSet/db" {
			t.Errorf("expected %v, want Deployment/web and StatefulSet/db only", expected)
		}
	}

	// JUnit: valid against the schema; unexpected usage a failure when
	// failing, a skipped warning in warn mode; one testcase per workload.
	xsd := filepath.Join(dir, "junit.xsd")
	os.WriteFile(xsd, []byte(junitXSD), 0o644)
	for _, tc := range []struct {
		failOn            string
		code              int
		failures, skipped int
	}{{"unexpected", 1, 6, 0}, {"never", 0, 0, 6}} {
		out, code := runReportCmd(t, "--events", saved, "--format", "junit", "--expectations", some, "--fail-on", tc.failOn)
		xmlPath := filepath.Join(dir, "junit-"+tc.failOn+".xml")
		os.WriteFile(xmlPath, []byte(out), 0o644)
		if lint, err := exec.Command("xmllint", "--noout", "--schema", xsd, xmlPath).CombinedOutput(); err != nil {
			t.Errorf("xmllint --schema: %v\n%s\n%s", err, lint, out)
		}
		if code != tc.code || strings.Count(out, "<testcase ") != len(want) || strings.Count(out, "<failure ") != tc.failures || strings.Count(out, "<skipped ") != tc.skipped {
			t.Errorf("junit --fail-on %s: exit %d, %d testcases, %d failures, %d skipped; want %d, %d, %d, %d\n%s", tc.failOn, code,
				strings.Count(out, "<testcase "), strings.Count(out, "<failure "), strings.Count(out, "<skipped "), tc.code, len(want), tc.failures, tc.skipped, out)
		}
	}

	// Bad flags and unreadable inputs are 2, never a pass.
	for _, args := range [][]string{{"--format", "xml"}, {"--fail-on", "sometimes"}, {"/nonexistent/findings.jsonl"}, {"--events", "/nonexistent"}, {"--expectations", "/nonexistent", "--events", saved}} {
		if _, code := runReportCmd(t, args...); code != 2 {
			t.Errorf("report %v: exit %d, want 2", args, code)
		}
	}
}

// saveEvents writes what a CI job saves, kubectl get events -A -o json
// (core/v1), to dir and returns its path.
func saveEvents(t *testing.T, cs kubernetes.Interface, dir string) string {
	t.Helper()
	evs, err := cs.CoreV1().Events("").List(kubetest.Ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evs.Kind, evs.APIVersion = "List", "v1"
	saved := filepath.Join(dir, "events.json")
	b, _ := json.Marshal(evs)
	if err := os.WriteFile(saved, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return saved
}

func compactStrings(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func TestReportFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--help"}, 0, "iptables-alerter report [FINDINGS-FILE...] [flags]"},
		// A bad value is one line naming it and the allowed ones.
		{[]string{"--format", "csv"}, 2, `iptables-alerter report: invalid argument "csv" for "-o, --format" flag: want text, markdown, json, junit, html (see 'iptables-alerter report --help')` + "\n"},
		{[]string{"-n", "Not_A_Namespace"}, 2, `--namespace: check namespace "Not_A_Namespace"`},
		{[]string{"--fail-on", "sometimes"}, 2, `invalid argument "sometimes" for "--fail-on" flag: want never, unexpected, breaks`},
		{[]string{"--timeout", "0s"}, 2, "--timeout 0s: want a positive duration"},
		{[]string{"--nope"}, 2, "unknown flag: --nope"},
		{[]string{"-format", "json"}, 2, "unknown shorthand flag"},
		// No inputs, no kubeconfig, not in a pod: an error, never a pass.
		{[]string{}, 2, "no --kubeconfig, $KUBECONFIG or ~/.kube/config, and not running in a pod"},
		{[]string{"--kubeconfig", "/nonexistent/kubeconfig"}, 2, "load kubeconfig"},
	} {
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		t.Setenv("KUBERNETES_SERVICE_PORT", "")
		// Set, it is the only place looked in (not ~/.kube/config).
		t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
		code, stdout, stderr := runCmd(t, append([]string{"report"}, tc.args...)...)
		if out := stdout + stderr; code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("report %v: exit %d, want %d; output lacks %q?\n%s", tc.args, code, tc.code, tc.out, out)
		}
		if code == 2 && strings.Count(stderr, "\n") != 1 {
			t.Errorf("report %v: want one line on stderr, got %q", tc.args, stderr)
		}
	}
}
