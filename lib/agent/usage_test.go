package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// TestUsage: a pod enters the usage with a finding of state present and
// leaves when a complete scan finds nothing, when it stops, or when a
// sweep's list no longer holds it; what does not say (unknown, failed,
// unreachable, dropped) keeps the last usage seen.
func TestUsage(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	meta := func(id, stage string) scan.Meta {
		return scan.Meta{SandboxID: id, Stage: stage, Owner: "Deployment/web", Pod: findings.Pod{Namespace: "ns", Name: "pod-" + id}}
	}
	found := func(id string, state findings.State, xt int) Scan {
		r := &findings.Record{State: state, Pod: meta(id, "").Pod, Impact: findings.Impact{Xt: xt}, Time: t0,
			Vendors: []findings.Vendor{{Name: "istio"}}}
		return Scan{Meta: meta(id, "PostStartContainer"), Outcome: Found, Record: r}
	}
	with := func(s Scan, stage string) Scan { s.Meta.Stage = stage; return s }
	other := func(id string, o Outcome) Scan { return Scan{Meta: meta(id, "PostStartContainer"), Outcome: o} }
	want := func(id string, xt int) PodUsage {
		return PodUsage{SandboxID: id, Namespace: "ns", Name: "pod-" + id, Owner: "Deployment/web",
			Impact: findings.Impact{Xt: xt}, Vendors: []string{"istio"}, Time: t0}
	}
	tests := []struct {
		name  string
		scans []Scan
		// listed, when set, is a sweep's list after the scans.
		listed map[string]bool
		want   []PodUsage
		left   uint64
	}{
		{name: "present enters", scans: []Scan{found("a", findings.StatePresent, 3)}, want: []PodUsage{want("a", 3)}},
		{name: "the latest present wins", scans: []Scan{found("a", findings.StatePresent, 3), found("a", findings.StatePresent, 5)}, want: []PodUsage{want("a", 5)}},
		{name: "clean leaves", scans: []Scan{found("a", findings.StatePresent, 3), other("a", Clean)}},
		{name: "state gone leaves", scans: []Scan{found("a", findings.StatePresent, 3), found("a", findings.StateGone, 0)}},
		{name: "netns gone at a stop leaves", scans: []Scan{found("a", findings.StatePresent, 3), with(other("a", Gone), "StopContainer")}},
		{name: "the sandbox's stop leaves, usage or not", scans: []Scan{found("a", findings.StatePresent, 3), with(found("a", findings.StatePresent, 3), "StopPodSandbox")}},
		{name: "a container's stop with usage stays", scans: []Scan{with(found("a", findings.StatePresent, 3), "StopContainer")}, want: []PodUsage{want("a", 3)}},
		{name: "unknown keeps the last usage", scans: []Scan{found("a", findings.StatePresent, 3), found("a", findings.StateUnknown, 0)}, want: []PodUsage{want("a", 3)}},
		{name: "unknown alone does not enter", scans: []Scan{found("a", findings.StateUnknown, 0)}},
		{name: "failed, unreachable, dropped keep it", scans: []Scan{found("a", findings.StatePresent, 3), other("a", Failed), other("a", Unreachable), other("a", Dropped)}, want: []PodUsage{want("a", 3)}},
		{name: "a sweep drops what it does not list", scans: []Scan{found("a", findings.StatePresent, 3), found("b", findings.StatePresent, 1)},
			listed: map[string]bool{"b": true}, want: []PodUsage{want("b", 1)}},
		{name: "past the bound, left out and counted", scans: []Scan{found("a", findings.StatePresent, 3), found("b", findings.StatePresent, 1), found("c", findings.StatePresent, 1), found("a", findings.StatePresent, 4)},
			want: []PodUsage{want("a", 4), want("b", 1)}, left: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := NewUsage(2)
			for _, s := range tt.scans {
				u.Scanned(s)
			}
			if tt.listed != nil {
				u.Listed(tt.listed)
			}
			if diff := cmp.Diff(tt.want, u.Pods(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}
			if got := u.Left(); got != tt.left {
				t.Errorf("left = %d, want %d", got, tt.left)
			}
		})
	}
}

// TestUsageOneSeriesPerPodName: two sandboxes of one pod name (the pod
// recreated before the old sandbox's stop) give one pod, the newer.
func TestUsageOneSeriesPerPodName(t *testing.T) {
	u := NewUsage(0)
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for i, id := range []string{"new", "old"} {
		u.Scanned(Scan{Meta: scan.Meta{SandboxID: id}, Outcome: Found, Record: &findings.Record{State: findings.StatePresent,
			Pod: findings.Pod{Namespace: "ns", Name: "web-0"}, Impact: findings.Impact{Legacy: 1}, Time: t0.Add(-time.Duration(i) * time.Minute)}})
	}
	pods := u.Pods()
	if len(pods) != 1 || pods[0].SandboxID != "new" {
		t.Fatalf("pods = %+v, want the new sandbox's only", pods)
	}
}

// TestOwnerOf: the owner is named only where a controller's label proves
// it.
func TestOwnerOf(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		pod    string
		want   string
	}{
		{name: "deployment", labels: map[string]string{labelTemplate: "7d4b9c8f5"}, pod: "web-api-7d4b9c8f5-x2k9q", want: "Deployment/web-api"},
		{name: "hash not in the name", labels: map[string]string{labelTemplate: "7d4b9c8f5"}, pod: "web-api-x2k9q"},
		{name: "statefulset", labels: map[string]string{labelStatefulPod: "db-12"}, pod: "db-12", want: "StatefulSet/db"},
		{name: "statefulset label of another pod", labels: map[string]string{labelStatefulPod: "db-1"}, pod: "db-12"},
		{name: "job", labels: map[string]string{labelJobName: "backup-29001", labelJobNameOld: "backup-29001"}, pod: "backup-29001-abcde", want: "Job/backup-29001"},
		{name: "job, old label only", labels: map[string]string{labelJobNameOld: "migrate"}, pod: "migrate-abcde", want: "Job/migrate"},
		{name: "daemonset", labels: map[string]string{labelRevision: "5f8d9c7b6", labelGeneration: "3"}, pod: "kube-proxy-7xq2p", want: "DaemonSet/kube-proxy"},
		// A pod name of 62 characters holds its base whole; one of 63
		// holds a cut base for any DaemonSet name of 58 or more.
		{name: "daemonset, longest whole name", labels: map[string]string{labelRevision: "5f8d9c7b6", labelGeneration: "1"}, pod: strings.Repeat("d", 56) + "-7xq2p", want: "DaemonSet/" + strings.Repeat("d", 56)},
		{name: "daemonset, name maybe cut", labels: map[string]string{labelRevision: "5f8d9c7b6", labelGeneration: "1"}, pod: strings.Repeat("d", 57) + "-7xq2p"},
		{name: "daemonset label, no generated suffix", labels: map[string]string{labelRevision: "5f8d9c7b6", labelGeneration: "1"}, pod: "agent-x"},
		// A StatefulSet's pod whose pod-name label is not its own has the
		// revision hash but no template generation.
		{name: "revision hash only", labels: map[string]string{labelRevision: "5f8d"}, pod: "agent-7xq2p"},
		{name: "job of a cronjob", labels: map[string]string{labelJobName: "backup-29001"}, pod: "backup-29001-abcde", want: "Job/backup-29001"},
		{name: "no labels", pod: "web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ownerOf(tt.labels, tt.pod); got != tt.want {
				t.Errorf("ownerOf(%v, %q) = %q, want %q", tt.labels, tt.pod, got, tt.want)
			}
		})
	}
}

// Readiness is what the agent's word (findings.Swept) carries: the worst
// of the pods' latest findings, the node's own included; unknown for usage
// not classified and once a pod was left out.
func TestUsageReadiness(t *testing.T) {
	found := func(id string, impact findings.Impact, worst string) Scan {
		return Scan{Meta: scan.Meta{SandboxID: id}, Outcome: Found, Record: &findings.Record{State: findings.StatePresent,
			Pod: findings.Pod{Namespace: "ns", Name: id}, Impact: impact, Worst: worst}}
	}
	u := NewUsage(2)
	if r := u.Readiness(); r != findings.ReadinessReady {
		t.Errorf("no pods: %s, want ready", r)
	}
	u.Scanned(found("a", findings.Impact{Xt: 1}, findings.ImpactXt))
	if r := u.Readiness(); r != findings.ReadinessNeedsExtra {
		t.Errorf("a pod's xt rules: %s, want needs-extra", r)
	}
	u.Scanned(found("b", findings.Impact{Legacy: 1}, findings.ImpactLegacy))
	if r := u.Readiness(); r != findings.ReadinessBreaks {
		t.Errorf("a pod's legacy rules: %s, want breaks", r)
	}
	u.Scanned(Scan{Meta: scan.Meta{SandboxID: "b"}, Outcome: Clean})
	u.Scanned(found("a", findings.Impact{Native: 1}, ""))
	if r := u.Readiness(); r != findings.ReadinessUnknown {
		t.Errorf("usage not classified: %s, want unknown", r)
	}
	u.Scanned(found("a", findings.Impact{Native: 1}, findings.ImpactNative))
	if r := u.Readiness(); r != findings.ReadinessReady {
		t.Errorf("native rules only: %s, want ready", r)
	}
	u.Scanned(found("b", findings.Impact{Native: 1}, findings.ImpactNative))
	u.Scanned(found("c", findings.Impact{Native: 1}, findings.ImpactNative))
	if r := u.Readiness(); r != findings.ReadinessUnknown {
		t.Errorf("a pod left out: %s, want unknown", r)
	}
	// Only while it runs: a lifetime count kept the node unknown after
	// it stopped, and so did a pod left out of the command counts.
	u.Stopped("c")
	if r := u.Readiness(); r != findings.ReadinessReady {
		t.Errorf("the pod left out stopped: %s, want ready", r)
	}
	u.Exec(scan.Meta{SandboxID: "d"}, false, time.Time{})
	u.Exec(scan.Meta{SandboxID: "e"}, false, time.Time{})
	u.Exec(scan.Meta{SandboxID: "f"}, false, time.Time{})
	if r := u.Readiness(); r != findings.ReadinessReady {
		t.Errorf("a pod left out of the command counts: %s, want ready", r)
	}
	u.Scanned(found("g", findings.Impact{Legacy: 1}, findings.ImpactLegacy))
	u.Listed(map[string]bool{"a": true, "b": true})
	if r := u.Readiness(); r != findings.ReadinessReady {
		t.Errorf("the pod left out no longer listed: %s, want ready", r)
	}
}

// TestUsageIncompleteLook: a truncated look (the x_tables lock kept busy)
// seeing milder rules than the pod's last look keeps the pod's level, its
// series and the agent's word; a truncated look seeing worse ones, and a
// complete look, decide.
func TestUsageIncompleteLook(t *testing.T) {
	look := func(impact findings.Impact, truncated bool) Scan {
		return Scan{Meta: scan.Meta{SandboxID: "a"}, Outcome: Found, Record: &findings.Record{State: findings.StatePresent,
			Pod: findings.Pod{Namespace: "ns", Name: "a"}, Impact: impact, Worst: impact.Worst(), Truncated: truncated}}
	}
	u := NewUsage(10)
	for _, c := range []struct {
		name  string
		look  Scan
		worst string
		want  string
	}{
		{"legacy rules seen", look(findings.Impact{Legacy: 2}, false), findings.ImpactLegacy, findings.ReadinessBreaks},
		{"then a truncated look of native ones", look(findings.Impact{Native: 1}, true), findings.ImpactLegacy, findings.ReadinessBreaks},
		{"then a complete look of native ones", look(findings.Impact{Native: 1}, false), findings.ImpactNative, findings.ReadinessReady},
		{"then a truncated look of xt ones", look(findings.Impact{Xt: 1}, true), findings.ImpactXt, findings.ReadinessNeedsExtra},
	} {
		u.Scanned(c.look)
		if p := u.Pods(); len(p) != 1 || p[0].Worst != c.worst || u.Readiness() != c.want {
			t.Errorf("%s: %+v, readiness %s; want worst %s, %s", c.name, p, u.Readiness(), c.worst, c.want)
		}
	}

	// A pod this Usage has not followed (the agent restarted): the
	// record step's memory gives the level an incomplete look keeps.
	kept := &findings.KeptUsage{Worst: findings.ImpactLegacy, Impact: findings.Impact{Legacy: 2}}
	fresh := NewUsage(10)
	unknown := Scan{Meta: scan.Meta{SandboxID: "a"}, Outcome: Found, Kept: kept, Record: &findings.Record{State: findings.StateUnknown,
		Pod: findings.Pod{Namespace: "ns", Name: "a"}, Truncated: true}}
	fresh.Scanned(unknown)
	if p := fresh.Pods(); len(p) != 1 || p[0].Worst != findings.ImpactLegacy || p[0].Impact.Legacy != 2 || p[0].Name != "a" {
		t.Errorf("unknown look, memory kept legacy: %+v", p)
	}
	fresh = NewUsage(10)
	cut := look(findings.Impact{Native: 1}, true)
	cut.Kept = kept
	fresh.Scanned(cut)
	if p := fresh.Pods(); len(p) != 1 || p[0].Worst != findings.ImpactLegacy {
		t.Errorf("truncated look, memory kept legacy: %+v", p)
	}
}

// TestUsageAfterStop: a scan or a command of a sandbox that ends after
// the runtime said it stopped does not bring the pod back; one whose netns
// was only found gone comes back with its next finding; the stopped
// sandboxes remembered are bounded, the oldest forgotten first.
func TestUsageAfterStop(t *testing.T) {
	u := NewUsage(0)
	present := func(id string) Scan {
		return Scan{Meta: scan.Meta{SandboxID: id}, Outcome: Found, Record: &findings.Record{State: findings.StatePresent,
			Pod: findings.Pod{Namespace: "ns", Name: "pod-" + id}, Nft: findings.Nft{Rules: 1}}}
	}
	has := func(id string) bool {
		for _, p := range u.Pods() {
			if p.SandboxID == id {
				return true
			}
		}
		return false
	}
	u.Scanned(present("old"))
	u.Ended("old")
	u.Scanned(present("old"))
	u.Exec(scan.Meta{SandboxID: "old", Pod: findings.Pod{Namespace: "ns", Name: "pod-old"}}, true, time.Now())
	if has("old") || len(u.execCounts()) != 0 {
		t.Fatalf("a stopped sandbox's late scan and command came back: pods %+v, commands %+v", u.Pods(), u.execCounts())
	}
	// A netns found gone only drops the pod: the next scan that finds
	// it brings it back.
	u.Scanned(present("vanished"))
	u.Stopped("vanished")
	u.Scanned(Scan{Meta: scan.Meta{SandboxID: "vanished"}, Outcome: Gone})
	u.Scanned(present("vanished"))
	if !has("vanished") {
		t.Error("a pod whose netns was found gone did not come back with its next finding")
	}
	for i := range maxEnded {
		u.Ended(fmt.Sprint("s", i))
	}
	if len(u.ended) != maxEnded || len(u.endedOrder) != maxEnded {
		t.Fatalf("%d stopped sandboxes remembered, want %d", len(u.ended), maxEnded)
	}
	u.Scanned(present("old"))
	if !has("old") {
		t.Error("the oldest stopped sandbox still remembered past the bound")
	}
}

// TestUsageNodeLooks: the node's own usage in the word: a complete look
// decides, a cut one only worsens it, and a cut one first after a restart
// starts from the record step's memory, as a pod's does (its xt rules
// seen while the x_tables lock hid its legacy ones said needs-extra).
func TestUsageNodeLooks(t *testing.T) {
	look := func(worst string, cut bool, kept *findings.KeptUsage) Scan {
		r := &findings.Record{Subject: findings.SubjectNode, State: findings.StatePresent, Truncated: cut, Worst: worst}
		switch worst {
		case findings.ImpactXt:
			r.Impact = findings.Impact{Xt: 1}
		case findings.ImpactNative:
			r.Impact = findings.Impact{Native: 1}
		}
		r.Nft.Rules = 1
		return Scan{Outcome: Found, Record: r, Kept: kept}
	}
	u := NewUsage(2)
	u.NodeScanned(look(findings.ImpactXt, true, &findings.KeptUsage{Worst: findings.ImpactLegacy}))
	if r := u.Readiness(); r != findings.ReadinessBreaks {
		t.Errorf("a cut look after a restart, legacy kept: %s, want breaks", r)
	}
	u.NodeScanned(look(findings.ImpactNative, true, nil))
	if r := u.Readiness(); r != findings.ReadinessBreaks {
		t.Errorf("a milder cut look: %s, want breaks", r)
	}
	u.NodeScanned(look(findings.ImpactXt, false, nil))
	if r := u.Readiness(); r != findings.ReadinessNeedsExtra {
		t.Errorf("a complete look of xt rules: %s, want needs-extra", r)
	}
	u.NodeScanned(Scan{Outcome: Clean})
	if r := u.Readiness(); r != findings.ReadinessReady {
		t.Errorf("a clean look: %s, want ready", r)
	}
}
