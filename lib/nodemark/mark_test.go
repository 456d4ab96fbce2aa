package nodemark

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

func TestMark(t *testing.T) {
	for _, c := range []struct {
		levels []string
		want   string
	}{
		{nil, Ready},
		{[]string{findings.ImpactNative}, Ready},
		{[]string{findings.ImpactNative, findings.ImpactXt}, NeedsExtra},
		{[]string{findings.ImpactXt, "unclassified"}, Unknown},
		{[]string{findings.ImpactXt, Unknown}, Unknown},
		{[]string{Unknown, findings.ImpactLegacy, findings.ImpactXt}, Breaks},
	} {
		m := map[string]Entry{}
		for i, l := range c.levels {
			m[string(rune('a'+i))] = Entry{Level: l}
		}
		if got := Mark(m); got != c.want {
			t.Errorf("Mark(%v) = %q, want %q", c.levels, got, c.want)
		}
	}
}

func rec(uid string, state findings.State, worst string) findings.Record {
	r := findings.Record{Schema: findings.Schema, Time: findings.Now(), State: state, Pod: findings.Pod{Namespace: "ns", Name: "p-" + uid, UID: uid}}
	if uid == "" {
		r.Subject = findings.SubjectNode
	}
	if state == findings.StatePresent {
		r.Nft, r.Worst = findings.Nft{Rules: 1}, worst
	}
	return r
}

// TestConsume: the label follows the records, worst first, survives a new
// Marker on the same state file, and a refused patch holds no line and is
// tried again.
func TestConsume(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	path := filepath.Join(t.TempDir(), "state.json")
	log, _ := logtest.NewNullLogger()
	m, err := New(cs, "n1", DefaultLabel, path, log)
	if err != nil {
		t.Fatal(err)
	}
	label := func() string {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels[DefaultLabel]
	}
	steps := []struct {
		r    findings.Record
		want string
	}{
		{rec("u1", findings.StatePresent, findings.ImpactNative), Ready},
		{rec("u2", findings.StatePresent, findings.ImpactXt), NeedsExtra},
		{rec("", findings.StatePresent, findings.ImpactLegacy), Breaks},
		{rec("u3", findings.StateUnknown, ""), Breaks},
		{rec("", findings.StateGone, ""), Unknown},
		{rec("u3", findings.StateGone, ""), NeedsExtra},
	}
	for i, s := range steps {
		if err := m.Consume(ctx, s.r); err != nil {
			t.Fatal(err)
		}
		if got := label(); got != s.want {
			t.Fatalf("step %d: label %q, want %q", i, got, s.want)
		}
	}
	again, err := New(cs, "n1", DefaultLabel, path, log)
	if err != nil {
		t.Fatal(err)
	}
	if v := again.Value(); v != NeedsExtra {
		t.Errorf("after a restart: %q, want %q", v, NeedsExtra)
	}
	// Refused: Consume still returns nil; apply later succeeds.
	refuse, tries := true, 0
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		tries++
		if refuse {
			return true, nil, errors.New("forbidden")
		}
		return false, nil, nil
	})
	if err := again.Consume(ctx, rec("u2", findings.StateGone, "")); err != nil {
		t.Fatalf("Consume with the patch refused: %v", err)
	}
	// More findings of the same value: the retry ticker's, not theirs.
	for _, uid := range []string{"u4", "u5"} {
		if err := again.Consume(ctx, rec(uid, findings.StatePresent, findings.ImpactNative)); err != nil {
			t.Fatal(err)
		}
	}
	if tries != 1 {
		t.Errorf("%d patches tried for one value refused, want 1", tries)
	}
	if got := label(); got != NeedsExtra {
		t.Fatalf("label %q while refused", got)
	}
	refuse = false
	again.apply(ctx, true)
	if got := label(); got != Ready {
		t.Errorf("after the retry: label %q, want %q", got, Ready)
	}
}

// TestBound: beyond MaxEntries the oldest sighting goes.
func TestBound(t *testing.T) {
	m := &Marker{entries: map[string]Entry{}, log: logrus.New(), path: filepath.Join(t.TempDir(), "s")}
	base := findings.Now()
	for i := range MaxEntries + 1 {
		m.entries[string(rune(0x4e00+i))] = Entry{Level: findings.ImpactXt, Seen: base.Add(-1e9 * time.Duration(i))}
	}
	m.bound()
	if len(m.entries) != MaxEntries {
		t.Fatalf("%d entries", len(m.entries))
	}
	if _, ok := m.entries[string(rune(0x4e00+MaxEntries))]; ok {
		t.Errorf("the oldest sighting kept")
	}
}

// TestBoundKeepsWorst: pods churned past MaxEntries with a milder level
// (a hostile namespace's short-lived pods) push out none of the entries
// that decide the label, however old: the mildest go first.
func TestBoundKeepsWorst(t *testing.T) {
	m := &Marker{entries: map[string]Entry{}, log: logrus.New(), path: filepath.Join(t.TempDir(), "s")}
	base := findings.Now()
	m.entries["legacy"] = Entry{Level: findings.ImpactLegacy, Seen: base.Add(-time.Hour)}
	m.entries["unknown"] = Entry{Level: Unknown, Seen: base.Add(-time.Hour)}
	for i := range MaxEntries {
		level := findings.ImpactNative
		if i%2 == 0 {
			level = findings.ImpactXt
		}
		m.entries[string(rune(0x4e00+i))] = Entry{Level: level, Seen: base.Add(time.Duration(i))}
		m.bound()
	}
	if len(m.entries) != MaxEntries {
		t.Fatalf("%d entries", len(m.entries))
	}
	for _, k := range []string{"legacy", "unknown"} {
		if _, ok := m.entries[k]; !ok {
			t.Errorf("the %s entry was pushed out", k)
		}
	}
	// The two dropped are the oldest native ones.
	for _, i := range []int{1, 3} {
		if _, ok := m.entries[string(rune(0x4e00+i))]; ok {
			t.Errorf("native entry %d kept, want it dropped first", i)
		}
	}
	if v := Mark(m.entries); v != Breaks {
		t.Errorf("label %q, want %q", v, Breaks)
	}
}

// TestPrune: the prune drops the entries of pods that are gone (deleted,
// recreated under another UID, named as no pod can be, or ended: an
// evicted pod's object stays until the terminated-pod collector's
// threshold, and kept the node breaks after its pod moved) and keeps a
// static pod's, whose records carry the UID its mirror pod's annotation
// holds; a get refused for one pod does not stop the others' prune.
func TestPrune(t *testing.T) {
	ctx := context.Background()
	pod := func(name, uid string, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid), Annotations: ann}}
	}
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		pod("kube-proxy-n1", "mirror-uid", map[string]string{owner.MirrorAnnotation: "config-hash"}),
		pod("web", "web-2", nil), pod("refused", "r1", nil), pod("running", "run1", nil),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "evicted", UID: "e1"}, Status: corev1.PodStatus{Phase: corev1.PodFailed}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "done", UID: "j1"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}})
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "refused" {
			return true, nil, apierrors.NewBadRequest("refused for this pod")
		}
		return false, nil, nil
	})
	log, _ := logtest.NewNullLogger()
	m, err := New(cs, "n1", DefaultLabel, filepath.Join(t.TempDir(), "state.json"), log)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []findings.Record{
		{Pod: findings.Pod{Namespace: "ns", Name: "kube-proxy-n1", UID: "config-hash"}, Worst: findings.ImpactLegacy},
		{Pod: findings.Pod{Namespace: "ns", Name: "web", UID: "web-1"}, Worst: findings.ImpactXt},
		{Pod: findings.Pod{Namespace: "ns", Name: "deleted", UID: "d1"}, Worst: findings.ImpactXt},
		{Pod: findings.Pod{Namespace: "ns", Name: "no/such", UID: "x1"}, Worst: findings.ImpactXt},
		{Pod: findings.Pod{Namespace: "ns", Name: "refused", UID: "r1"}, Worst: findings.ImpactNative},
		{Pod: findings.Pod{Namespace: "ns", Name: "running", UID: "run1"}, Worst: findings.ImpactNative},
		{Pod: findings.Pod{Namespace: "ns", Name: "evicted", UID: "e1"}, Worst: findings.ImpactLegacy},
		{Pod: findings.Pod{Namespace: "ns", Name: "done", UID: "j1"}, Worst: findings.ImpactLegacy},
	} {
		r.Schema, r.Time, r.State, r.Nft = findings.Schema, findings.Now(), findings.StatePresent, findings.Nft{Rules: 1}
		if err := m.Consume(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	m.prune(ctx)
	var kept []string
	for uid := range m.entries {
		kept = append(kept, uid)
	}
	slices.Sort(kept)
	if want := []string{"config-hash", "r1", "run1"}; !slices.Equal(kept, want) {
		t.Errorf("entries after the prune: %v, want %v", kept, want)
	}
	if v := m.Value(); v != Breaks {
		t.Errorf("label after the prune: %q, want %q (the static pod's legacy rules)", v, Breaks)
	}
}

// TestCommandOnlyKeepsLevel: a command's own finding (the exec watch's
// read or failed write: state present, no rules) says nothing of the
// rules. It must not clear a pod's level (a pod with legacy rules running
// `iptables -L` stays breaks), and its own level counts: a legacy write
// refused for missing kernel support is the RHEL 10 breakage itself.
func TestCommandOnlyKeepsLevel(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	command := func(uid, worst string, e findings.Exec) findings.Record {
		r := findings.Record{Schema: findings.Schema, Time: findings.Now(), State: findings.StatePresent, Source: findings.SourceExec,
			Pod: findings.Pod{Namespace: "ns", Name: "p-" + uid, UID: uid}, Worst: worst, Exec: &e}
		return r
	}
	read := findings.Exec{Argv: []string{"iptables-nft", "-L"}, Backend: "nft", Operation: "read", Exited: true}
	refused := findings.Exec{Argv: []string{"iptables-legacy", "-A", "X"}, Backend: "legacy", Operation: "write",
		Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}
	other := findings.Exec{Argv: []string{"iptables-nft", "-A", "X"}, Backend: "nft", Operation: "write", Exited: true, ExitCode: 2, Failed: true}
	legacyRead := findings.Exec{Argv: []string{"iptables-legacy", "-L"}, Backend: "legacy", Operation: "read", Exited: true}
	for _, c := range []struct {
		name string
		recs []findings.Record
		want string
	}{
		{"read after legacy rules", []findings.Record{rec("u1", findings.StatePresent, findings.ImpactLegacy), command("u1", findings.ImpactNative, read)}, Breaks},
		{"other failure after xt rules", []findings.Record{rec("u1", findings.StatePresent, findings.ImpactXt), command("u1", "", other)}, NeedsExtra},
		{"refused legacy write alone", []findings.Record{command("u1", findings.ImpactLegacy, refused)}, Breaks},
		{"refused legacy write after native rules", []findings.Record{rec("u1", findings.StatePresent, findings.ImpactNative), command("u1", findings.ImpactLegacy, refused)}, Breaks},
		{"unknown, then a read", []findings.Record{rec("u1", findings.StateUnknown, ""), command("u1", findings.ImpactNative, read)}, Unknown},
		// A refused write leaves no rule: a look that finds none (or
		// other rules) does not answer for it (helper-129 #3), nor for a
		// legacy tool's run, which the exec watch records once.
		{"gone after a refused write", []findings.Record{command("u1", findings.ImpactLegacy, refused), rec("u1", findings.StateGone, "")}, Breaks},
		{"native rules after a refused write", []findings.Record{command("u1", findings.ImpactLegacy, refused), rec("u1", findings.StatePresent, findings.ImpactNative)}, Breaks},
		{"native rules after a legacy read", []findings.Record{command("u1", findings.ImpactLegacy, legacyRead), rec("u1", findings.StatePresent, findings.ImpactNative)}, Breaks},
		{"unknown after a refused write", []findings.Record{command("u1", findings.ImpactXt, refused), rec("u1", findings.StateUnknown, "")}, Unknown},
		{"legacy rules after an xt refusal, then gone", []findings.Record{rec("u1", findings.StatePresent, findings.ImpactLegacy), command("u1", findings.ImpactXt, refused), rec("u1", findings.StateGone, "")}, NeedsExtra},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
			m, err := New(cs, "n1", DefaultLabel, filepath.Join(t.TempDir(), "state.json"), log)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range c.recs {
				if err := m.Consume(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			if v := m.Value(); v != c.want {
				t.Errorf("label %q, want %q", v, c.want)
			}
		})
	}
}

// TestIncompleteLookNotReady: a look that stopped early but saw some usage
// is present with Truncated set (the counts a lower bound): native rules
// seen while a pod keeps the x_tables lock busy say nothing of its legacy
// rules, so the node is unknown, never ready or needs-extra; legacy rules
// seen still break it. Such a look (or an unknown one) after one that saw
// legacy rules keeps the node breaking: unknown is not gated by the
// shipped pool gate, and the legacy rules may well still be there. A
// complete look decides again.
func TestIncompleteLookNotReady(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	truncated := func(worst string) findings.Record {
		r := rec("u1", findings.StatePresent, worst)
		r.Truncated, r.Error = true, "inspect legacy: legacy x_tables busy"
		return r
	}
	legacy, native := rec("u1", findings.StatePresent, findings.ImpactLegacy), rec("u1", findings.StatePresent, findings.ImpactNative)
	for _, c := range []struct {
		name string
		recs []findings.Record
		want string
	}{
		{"truncated native", []findings.Record{truncated(findings.ImpactNative)}, Unknown},
		{"truncated xt", []findings.Record{truncated(findings.ImpactXt)}, Unknown},
		{"truncated legacy", []findings.Record{truncated(findings.ImpactLegacy)}, Breaks},
		{"unknown after legacy", []findings.Record{legacy, rec("u1", findings.StateUnknown, "")}, Breaks},
		{"truncated after legacy", []findings.Record{legacy, truncated(findings.ImpactNative)}, Breaks},
		{"unknown after native", []findings.Record{native, rec("u1", findings.StateUnknown, "")}, Unknown},
		{"truncated after native", []findings.Record{native, truncated(findings.ImpactNative)}, Unknown},
	} {
		cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
		m, err := New(cs, "n1", DefaultLabel, filepath.Join(t.TempDir(), "state.json"), log)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range c.recs {
			if err := m.Consume(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if v := m.Value(); v != c.want {
			t.Errorf("%s: label %q, want %q", c.name, v, c.want)
		}
		// The next complete look decides again.
		if err := m.Consume(ctx, native); err != nil {
			t.Fatal(err)
		}
		if v := m.Value(); v != Ready {
			t.Errorf("%s, then a complete look: label %q, want %q", c.name, v, Ready)
		}
	}
}

// TestHoldRelease: a marker without a state file is Fresh; held, it
// keeps levels without patching the Node or writing the state, so a
// replay cut short leaves the marker fresh at the next start; Release
// saves once, and the next New is not fresh.
func TestHoldRelease(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	path := filepath.Join(t.TempDir(), "state.json")
	m, err := New(cs, "n1", DefaultLabel, path, log)
	if err != nil || !m.Fresh() {
		t.Fatalf("New without a state file: fresh %v, %v", m != nil && m.Fresh(), err)
	}
	m.Hold()
	for _, r := range []findings.Record{rec("u1", findings.StatePresent, findings.ImpactLegacy), rec("u2", findings.StatePresent, findings.ImpactNative)} {
		if err := m.Consume(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(cs.Actions()); n != 0 {
		t.Errorf("%d API calls while held, want none", n)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("state file written while held: %v", err)
	}
	if v := m.Value(); v != Breaks {
		t.Errorf("value while held %q, want %q", v, Breaks)
	}
	m.Release()
	again, err := New(cs, "n1", DefaultLabel, path, log)
	if err != nil || again.Fresh() || again.Value() != Breaks {
		t.Fatalf("New after Release: fresh %v, value %q, %v", again.Fresh(), again.Value(), err)
	}
}

// TestDamagedStateFresh: a damaged state file (torn, garbage, too large)
// makes a fresh marker, said in the log, not an error that would stop the
// forwarder at every start.
func TestDamagedStateFresh(t *testing.T) {
	for name, data := range map[string][]byte{"torn": []byte(`{"entries":{"u1":{"lev`), "garbage": {0, 0, 0},
		"too large": append([]byte(`{"entries":{}, "x":"`), make([]byte, maxState)...)} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			log, hook := logtest.NewNullLogger()
			m, err := New(fake.NewClientset(), "n1", DefaultLabel, path, log)
			if err != nil || !m.Fresh() {
				t.Fatalf("New = fresh %v, %v; want a fresh marker", m != nil && m.Fresh(), err)
			}
			if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel {
				t.Errorf("no warning about the damaged state: %v", hook.AllEntries())
			}
		})
	}
}

// TestLookVouches: no finding reads as ready only under the agent's valid
// word that it looked at every pod (findings.Swept) and with every finding
// since that look read: otherwise unknown, or worse when a pod's level is.
func TestLookVouches(t *testing.T) {
	// Failed before the marker read the agent's word: a node nobody
	// looked at (no agent, no findings file) was labelled ready.
	now := time.Now()
	dir := t.TempDir()
	swept := filepath.Join(dir, "findings.jsonl.swept")
	caught := now
	m := newLookMarker(t, swept, func() time.Time { return caught })
	word := func(s findings.Swept) {
		t.Helper()
		if err := findings.WriteSwept(swept, s); err != nil {
			t.Fatal(err)
		}
	}
	good := findings.Swept{Node: "n1", Since: now.Add(-time.Minute), Until: now.Add(2 * time.Minute), Pods: 3}
	for _, c := range []struct {
		name   string
		set    func()
		levels []string
		want   string
	}{
		{"no word", func() {}, nil, Unknown},
		{"no word, a pod's xt rules", func() {}, []string{findings.ImpactXt}, Unknown},
		{"no word, a pod's legacy rules", func() {}, []string{findings.ImpactLegacy}, Breaks},
		{"valid word", func() { word(good) }, nil, Ready},
		{"valid word, a pod's xt rules", func() { word(good) }, []string{findings.ImpactXt}, NeedsExtra},
		{"another node's", func() { s := good; s.Node = "n2"; word(s) }, nil, Unknown},
		{"lapsed", func() { s := good; s.Until = now.Add(-time.Second); word(s) }, nil, Unknown},
		{"dated ahead", func() { s := good; s.Until = now.Add(time.Hour); word(s) }, nil, Unknown},
		{"not valid JSON", func() {
			if err := os.WriteFile(swept, []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, nil, Unknown},
		{"a link", func() {
			other := filepath.Join(dir, "other")
			word(good)
			if err := os.Rename(swept, other); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, swept); err != nil {
				t.Fatal(err)
			}
		}, nil, Unknown},
		{"findings since the look not read", func() { word(good); caught = good.Since.Add(-time.Second) }, nil, Unknown},
		{"reading stalled", func() { word(good); caught = now.Add(-MaxLag - time.Second) }, nil, Unknown},
		{"never read", func() { word(good); caught = time.Time{} }, nil, Unknown},
		// The agent's own readiness: a pod's finding this reader lost
		// (rotated away unread, a torn line) left no level here. Failed
		// before the word carried it: the node read ready.
		{"valid word, the agent's scans found legacy rules", func() { s := good; s.Readiness = Breaks; word(s) }, nil, Breaks},
		{"valid word, the agent's xt, a finding's legacy", func() { s := good; s.Readiness = NeedsExtra; word(s) }, []string{findings.ImpactLegacy}, Breaks},
		{"valid word, the agent's xt, reading behind", func() {
			s := good
			s.Readiness = NeedsExtra
			word(s)
			caught = good.Since.Add(-time.Second)
		}, nil, Unknown},
		{"lapsed word's legacy rules", func() { s := good; s.Readiness, s.Until = Breaks, now.Add(-time.Second); word(s) }, nil, Unknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.Remove(swept)
			caught, m.vouched = now, time.Time{}
			c.set()
			m.entries = map[string]Entry{}
			for i, l := range c.levels {
				m.entries[string(rune('a'+i))] = Entry{Level: l}
			}
			if got := m.Value(); got != c.want {
				t.Errorf("label %q, want %q", got, c.want)
			}
		})
	}
}

// TestLookGrace: a word moved on by a later scan (a pod started) while
// its finding is being read keeps the label for readGrace after the
// reading last reached a word, then says unknown.
func TestLookGrace(t *testing.T) {
	now := time.Now()
	swept := filepath.Join(t.TempDir(), "findings.jsonl.swept")
	caught := now.Add(-2 * time.Second)
	m := newLookMarker(t, swept, func() time.Time { return caught })
	word := findings.Swept{Node: "n1", Since: now.Add(-time.Minute), Until: now.Add(time.Minute)}
	if err := findings.WriteSwept(swept, word); err != nil {
		t.Fatal(err)
	}
	if v := m.Value(); v != Ready {
		t.Fatalf("read up to the word: %q", v)
	}
	word.Since = now.Add(-time.Second)
	if err := findings.WriteSwept(swept, word); err != nil {
		t.Fatal(err)
	}
	if v := m.Value(); v != Ready {
		t.Errorf("a later word, within readGrace: %q, want %q", v, Ready)
	}
	m.mu.Lock()
	m.vouched = m.vouched.Add(-readGrace - time.Second)
	m.mu.Unlock()
	if v := m.Value(); v != Unknown {
		t.Errorf("a later word, past readGrace: %q, want %q", v, Unknown)
	}
}

func newLookMarker(t *testing.T, swept string, caughtUp func() time.Time) *Marker {
	t.Helper()
	log, _ := logtest.NewNullLogger()
	m, err := New(fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}), "n1", DefaultLabel,
		filepath.Join(t.TempDir(), "state.json"), log)
	if err != nil {
		t.Fatal(err)
	}
	m.Swept, m.CaughtUp = swept, caughtUp
	return m
}

// TestStartWaitsForReading: a forwarder that starts does not label before
// it has read the findings once (the label the last run left stays), at
// most MaxLag; then it does.
func TestStartWaitsForReading(t *testing.T) {
	now := time.Now()
	swept := filepath.Join(t.TempDir(), "findings.jsonl.swept")
	if err := findings.WriteSwept(swept, findings.Swept{Node: "n1", Since: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var caught time.Time
	m := newLookMarker(t, swept, func() time.Time { return caught })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := m.kube.(*fake.Clientset)
	m.Start(ctx)
	if err := m.Consume(ctx, rec("u1", findings.StatePresent, findings.ImpactNative)); err != nil {
		t.Fatal(err)
	}
	if n := len(patches(cs)); n != 0 {
		t.Fatalf("%d patches before the findings were read once, want none", n)
	}
	caught = time.Now()
	m.apply(ctx, true)
	if p := patches(cs); len(p) != 1 || !strings.Contains(string(p[0].GetPatch()), `"`+Ready+`"`) {
		t.Fatalf("patches once read: %v, want one of %q", p, Ready)
	}
	// Past MaxLag without a reading: unknown, said.
	m.mu.Lock()
	m.started, caught = now.Add(-MaxLag-time.Second), time.Time{}
	m.mu.Unlock()
	m.apply(ctx, true)
	if p := patches(cs); len(p) != 2 || !strings.Contains(string(p[1].GetPatch()), `"`+Unknown+`"`) {
		t.Fatalf("patches never read past MaxLag: %v, want a second of %q", p, Unknown)
	}
}

func patches(cs *fake.Clientset) []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, p)
		}
	}
	return out
}

// TestReassert: a label removed by someone else comes back within Prune
// of its last patch, though its value did not change.
func TestReassert(t *testing.T) {
	// Failed before apply patched again after Prune: the removed label
	// stayed away until the value changed.
	ctx := context.Background()
	m := newLookMarker(t, "", nil)
	cs := m.kube.(*fake.Clientset)
	m.Prune = time.Hour
	m.apply(ctx, true)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+DefaultLabel+`":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	m.apply(ctx, true)
	if n := len(patches(cs)); n != 2 {
		t.Fatalf("%d patches within Prune, want 2 (ours, the removal)", n)
	}
	m.mu.Lock()
	m.appliedAt = m.appliedAt.Add(-m.Prune)
	m.mu.Unlock()
	m.apply(ctx, true)
	n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := n.Labels[DefaultLabel]; v != Ready {
		t.Errorf("label %q a Prune after the removal, want %q", v, Ready)
	}
}

// TestStartLabelsOnceRead: the findings read between Start's own try and
// its loop's first look: the label is patched then, not a Retry later.
func TestStartLabelsOnceRead(t *testing.T) {
	// Failed before the loop patched after its wait whatever it waited:
	// no patch until the Retry ticker's.
	now := time.Now()
	swept := filepath.Join(t.TempDir(), "findings.jsonl.swept")
	if err := findings.WriteSwept(swept, findings.Swept{Node: "n1", Since: now, Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	m := newLookMarker(t, swept, func() time.Time {
		if calls.Add(1) == 1 {
			return time.Time{}
		}
		return time.Now()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.Start(ctx)
	for deadline := time.Now().Add(10 * time.Second); len(patches(m.kube.(*fake.Clientset))) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no patch within 10 s of the findings read")
		}
	}
}

// TestCommandLevelLasts: a pod's command level outlives a restart (the
// state file keeps it) and a later look at its rules; the node's lasts
// until its next look (a host's one-off `iptables-legacy -L` must not
// hold the node's label for good).
func TestCommandLevelLasts(t *testing.T) {
	ctx := context.Background()
	log, _ := logtest.NewNullLogger()
	path := filepath.Join(t.TempDir(), "state.json")
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	m, err := New(cs, "n1", DefaultLabel, path, log)
	if err != nil {
		t.Fatal(err)
	}
	read := findings.Record{Schema: findings.Schema, Time: findings.Now(), State: findings.StatePresent, Source: findings.SourceExec,
		Pod: findings.Pod{Namespace: "ns", Name: "p-u1", UID: "u1"}, Worst: findings.ImpactLegacy,
		Exec: &findings.Exec{Argv: []string{"iptables-legacy", "-L"}, Backend: "legacy", Operation: "read", Exited: true}}
	for _, r := range []findings.Record{read, rec("u1", findings.StatePresent, findings.ImpactNative)} {
		if err := m.Consume(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	m, err = New(cs, "n1", DefaultLabel, path, log)
	if err != nil {
		t.Fatal(err)
	}
	if v := m.Value(); v != Breaks {
		t.Errorf("after a restart: %q, want %q", v, Breaks)
	}
	// The node's: until its next look.
	m, err = New(cs, "n1", DefaultLabel, filepath.Join(t.TempDir(), "state.json"), log)
	if err != nil {
		t.Fatal(err)
	}
	nodeRead := read
	nodeRead.Pod, nodeRead.Subject, nodeRead.Node = findings.Pod{}, findings.SubjectNode, "n1"
	look := findings.Record{Schema: findings.Schema, Time: findings.Now(), Node: "n1", Subject: findings.SubjectNode, State: findings.StatePresent,
		Nft: findings.Nft{Rules: 1}, Impact: findings.Impact{Native: 1}, Worst: findings.ImpactNative, Fingerprint: "fp-n"}
	if err := m.Consume(ctx, nodeRead); err != nil {
		t.Fatal(err)
	}
	if v := m.Value(); v != Breaks {
		t.Errorf("the node's legacy read: %q, want %q", v, Breaks)
	}
	if err := m.Consume(ctx, look); err != nil {
		t.Fatal(err)
	}
	if v := m.Value(); v != Ready {
		t.Errorf("the node's next look: %q, want %q", v, Ready)
	}
}
