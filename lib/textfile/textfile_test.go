package textfile

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a findings file written by the real appender, a state dir, a
// textfile dir, and a directory of stand-ins for pinned netns files.
type env struct {
	t                          *testing.T
	findings, state, text, run string
	resets                     int
}

func newEnv(t *testing.T) *env {
	d := t.TempDir()
	e := &env{t: t, findings: filepath.Join(d, "log", "findings.jsonl"), state: filepath.Join(d, "state"), text: filepath.Join(d, "text"), run: filepath.Join(d, "netns")}
	for _, p := range []string{filepath.Dir(e.findings), e.text, e.run} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// netns makes a stand-in pinned netns and returns its path.
func (e *env) netns(name string) string {
	p := filepath.Join(e.run, name)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) append(recs ...findings.Record) {
	e.t.Helper()
	for _, r := range recs {
		if err := (findings.Log{Path: e.findings}).Append(context.Background(), r); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) appendRaw(s string) {
	e.t.Helper()
	f, err := os.OpenFile(e.findings, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		e.t.Fatal(err)
	}
}

// once is what `textfile --once` does, with a fixed clock.
func (e *env) once(now time.Time) *Collector {
	e.t.Helper()
	c, err := Open(e.state, e.text)
	if err != nil {
		e.t.Fatal(err)
	}
	c.Now = func() time.Time { return now }
	f := c.Follower(e.findings)
	f.Reset = func(error) { e.resets++ }
	if err := f.Once(context.Background(), c.Handle); err != nil {
		e.t.Fatal(err)
	}
	if _, err := c.Refresh(); err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) prom() string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.text, FileName))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func rec(ns, name, uid, netns string, nft, legacy int, at time.Time) findings.Record {
	r := findings.Record{Time: at, Node: "node-1", Source: "hook", Stage: "poststart", ContainerID: "c-" + uid, Pod: findings.Pod{Namespace: ns, Name: name, UID: uid}, Netns: netns, Fingerprint: "fp-" + uid}
	r.Nft.Rules, r.Legacy.Rules = nft, legacy
	r.Impact = findings.Impact{Legacy: legacy, Xt: nft}
	r.Worst = r.Impact.Worst()
	if nft > 0 {
		r.Nft.Tables = []string{"ip filter"}
	}
	if legacy > 0 {
		r.Legacy.Tables = []string{"ip filter"}
	}
	return r
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", p, diff)
	}
}

func TestCollector(t *testing.T) {
	tests := []struct {
		name string
		// feed writes findings into e and returns the clock for the run.
		feed          func(e *env) time.Time
		wantPods      []string // namespace/name=nft,legacy
		wantFindings  uint64
		wantMalformed uint64
	}{
		{
			name: "two pods, both backends",
			feed: func(e *env) time.Time {
				e.append(rec("team-a", "web-1", "u1", e.netns("a"), 3, 0, t0), rec("team-b", "db-0", "u2", e.netns("b"), 0, 2, t0.Add(time.Second)))
				return t0.Add(time.Minute)
			},
			wantPods:     []string{"team-a/web-1=3,0", "team-b/db-0=0,2"},
			wantFindings: 2,
		},
		{
			name: "latest finding per pod wins, older replays do not",
			feed: func(e *env) time.Time {
				ns := e.netns("a")
				e.append(rec("team-a", "web-1", "u1", ns, 3, 0, t0), rec("team-a", "web-1", "u1", ns, 5, 1, t0.Add(time.Second)), rec("team-a", "web-1", "u1", ns, 1, 0, t0))
				return t0.Add(time.Minute)
			},
			wantPods:     []string{"team-a/web-1=5,1"},
			wantFindings: 3,
		},
		{
			name: "a command's own finding keeps the pod's counts",
			feed: func(e *env) time.Time {
				ns := e.netns("a")
				failed := rec("team-a", "web-1", "u1", ns, 0, 0, t0.Add(time.Second))
				failed.Source, failed.State, failed.Worst = findings.SourceExec, findings.StatePresent, findings.ImpactLegacy
				failed.Exec = &findings.Exec{Argv: []string{"iptables-legacy", "-t", "nat", "-A", "X"}, Exited: true, ExitCode: 3, Failed: true}
				e.append(rec("team-a", "web-1", "u1", ns, 3, 0, t0), failed)
				return t0.Add(time.Minute)
			},
			wantPods:     []string{"team-a/web-1=3,0"},
			wantFindings: 2,
		},
		{
			name: "pod whose netns is gone is dropped",
			feed: func(e *env) time.Time {
				e.append(rec("team-a", "web-1", "u1", e.netns("a"), 3, 0, t0), rec("team-a", "gone-1", "u2", filepath.Join(e.run, "deleted"), 4, 0, t0))
				return t0.Add(time.Minute)
			},
			wantPods:     []string{"team-a/web-1=3,0"},
			wantFindings: 2,
		},
		{
			name: "netns in a directory we cannot see is kept",
			feed: func(e *env) time.Time {
				e.append(rec("team-a", "web-1", "u1", "/nonexistent-dir/netns/x", 3, 0, t0))
				return t0.Add(time.Minute)
			},
			wantPods:     []string{"team-a/web-1=3,0"},
			wantFindings: 1,
		},
		{
			name: "forget-after drops an old pod",
			feed: func(e *env) time.Time {
				e.append(rec("team-a", "old", "u1", "", 3, 0, t0), rec("team-a", "new", "u2", "", 1, 0, t0.Add(23*time.Hour)))
				return t0.Add(25 * time.Hour)
			},
			wantPods:     []string{"team-a/new=1,0"},
			wantFindings: 2,
		},
		{
			name: "forget-after keeps an old pod whose netns is still there",
			feed: func(e *env) time.Time {
				e.append(rec("team-a", "quiet", "u1", e.netns("a"), 3, 0, t0))
				return t0.Add(25 * time.Hour)
			},
			wantPods:     []string{"team-a/quiet=3,0"},
			wantFindings: 1,
		},
		{
			name: "forget-after drops an old pod whose netns cannot be checked",
			feed: func(e *env) time.Time {
				e.append(rec("team-a", "old", "u1", "/nonexistent-dir/netns/x", 3, 0, t0))
				return t0.Add(25 * time.Hour)
			},
			wantPods:     []string{},
			wantFindings: 1,
		},
		{
			name: "recreated pod with the same name gives one series, the newest",
			feed: func(e *env) time.Time {
				e.append(rec("team-a", "web-0", "old-uid", e.netns("a"), 9, 0, t0), rec("team-a", "web-0", "new-uid", e.netns("b"), 2, 0, t0.Add(time.Second)))
				return t0.Add(time.Minute)
			},
			wantPods:     []string{"team-a/web-0=2,0"},
			wantFindings: 2,
		},
		{
			name: "malformed lines are counted and skipped",
			feed: func(e *env) time.Time {
				e.appendRaw("not json\n{\"schema\":\"other/v9\"}\n")
				e.append(rec("team-a", "web-1", "u1", "", 1, 0, t0))
				e.appendRaw(`{"schema":"iptables-alerter/v1","fingerprint":"x","pod":{"uid":""}}` + "\n")
				return t0.Add(time.Minute)
			},
			wantPods:      []string{"team-a/web-1=1,0"},
			wantFindings:  1,
			wantMalformed: 3,
		},
		{
			// Issue 19 item 2: the agent's node mode writes records with no pod.
			name: "a node's record is counted, not a pod's series",
			feed: func(e *env) time.Time {
				n := rec("", "", "", "", 4, 0, t0)
				n.Subject = findings.SubjectNode
				e.append(n, rec("team-a", "web-1", "u1", "", 1, 0, t0))
				return t0.Add(time.Minute)
			},
			wantPods:     []string{"team-a/web-1=1,0"},
			wantFindings: 2,
		},
		{
			name:     "no findings file yet",
			feed:     func(e *env) time.Time { return t0 },
			wantPods: []string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			c := e.once(tc.feed(e))
			got := []string{}
			for _, p := range c.Pods() {
				got = append(got, p.Namespace+"/"+p.Name+"="+strconv.Itoa(p.NftRules)+","+strconv.Itoa(p.LegacyRules))
			}
			if diff := cmp.Diff(tc.wantPods, got); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}
			f, m := c.Counts()
			if f != tc.wantFindings || m != tc.wantMalformed {
				t.Errorf("counts = %d findings, %d malformed; want %d, %d", f, m, tc.wantFindings, tc.wantMalformed)
			}
			if _, err := os.Stat(filepath.Join(e.text, FileName)); err != nil {
				t.Errorf("no textfile written: %v", err)
			}
		})
	}
}

func TestTextfileGolden(t *testing.T) {
	e := newEnv(t)
	web := rec("team-a", "web-1", "u1", e.netns("a"), 3, 0, t0)
	web.Vendors = []findings.Vendor{{Name: "istio"}, {Name: "linkerd"}}
	db := rec("team-b", "db-0", "u2", e.netns("b"), 1, 2, t0.Add(1500*time.Millisecond))
	db.Vendors = []findings.Vendor{{Name: "acme-mesh\n"}}
	hider := rec("team-a", "hider", "u3", e.netns("c"), 0, 0, t0)
	hider.Truncated, hider.Error = true, "inspect legacy tables: legacy x_tables busy"
	e.append(web, db, hider)
	e.appendRaw("garbage\n")
	e.once(t0.Add(time.Minute))
	golden(t, "two-flagged.prom", e.prom())
}

func TestStateSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	e.append(rec("team-a", "web-1", "u1", e.netns("a"), 3, 0, t0))
	e.appendRaw("garbage\n")
	e.once(t0.Add(time.Minute))
	first := e.prom()
	e.once(t0.Add(2 * time.Minute)) // nothing new
	if diff := cmp.Diff(first, e.prom()); diff != "" {
		t.Errorf("restart changed the textfile (-before +after):\n%s", diff)
	}
	e.append(rec("team-b", "db-0", "u2", e.netns("b"), 0, 2, t0.Add(time.Second)))
	c := e.once(t0.Add(3 * time.Minute))
	if f, m := c.Counts(); f != 2 || m != 1 {
		t.Errorf("counts after restart = %d, %d; want 2, 1", f, m)
	}
	if n := len(c.Pods()); n != 2 {
		t.Errorf("pods after restart = %d, want 2", n)
	}
}

// Versions before the collector was its own checkpoint store kept a second
// copy in checkpoint.json, saved after the state (so never ahead of it). An
// existing pair, even with checkpoint.json behind, is taken over from the
// state without counting a line twice, and the old file goes away.
func TestOldCheckpointPairMigrates(t *testing.T) {
	e := newEnv(t)
	e.append(rec("team-a", "web-1", "u1", "", 3, 0, t0))
	e.once(t0.Add(time.Minute))
	early := follow.FileStore(filepath.Join(e.state, "early.json"))
	if err := early.Save(mustLoad(t, e).Checkpoint); err != nil {
		t.Fatal(err)
	}
	e.append(rec("team-a", "web-2", "u2", "", 1, 0, t0))
	e.once(t0.Add(time.Minute))
	// The pair as the old version left it after a crash between its two
	// saves: the state past both lines, checkpoint.json past the first.
	old := filepath.Join(e.state, oldCheckpointFile)
	if err := os.Rename(string(early), old); err != nil {
		t.Fatal(err)
	}
	e.append(rec("team-b", "db-0", "u3", "", 0, 2, t0))
	c := e.once(t0.Add(time.Minute))
	if f, _ := c.Counts(); f != 3 {
		t.Errorf("findings after migration = %d, want 3 (a line was counted twice or lost)", f)
	}
	if n := len(c.Pods()); n != 3 {
		t.Errorf("pods after migration = %d, want 3", n)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old checkpoint file still there: %v", err)
	}
}

func mustLoad(t *testing.T, e *env) State {
	t.Helper()
	s, err := loadState(filepath.Join(e.state, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A torn or garbage state file used to make every start fail. Now the
// collector starts empty and the follower replays: every pod comes back.
func TestDamagedStateReplays(t *testing.T) {
	for _, junk := range []string{`{"version":1,"pods":{"u1":{"name":"we`, "\x00\x00garbage", ""} {
		e := newEnv(t)
		e.append(rec("team-a", "web-1", "u1", e.netns("a"), 3, 0, t0))
		e.append(rec("team-b", "db-0", "u2", e.netns("b"), 0, 2, t0))
		e.once(t0.Add(time.Minute))
		want := e.prom()
		if err := os.WriteFile(filepath.Join(e.state, stateFile), []byte(junk), 0o640); err != nil {
			t.Fatal(err)
		}
		c := e.once(t0.Add(time.Minute))
		if e.resets != 1 {
			t.Errorf("state %q: Reset told %d times, want 1", junk, e.resets)
		}
		if diff := cmp.Diff(want, e.prom()); diff != "" {
			t.Errorf("state %q: textfile after replay (-before +after):\n%s", junk, diff)
		}
		if f, _ := c.Counts(); f != 2 {
			t.Errorf("state %q: findings = %d, want 2", junk, f)
		}
		// The replayed state is saved: the next start is a normal one.
		e.once(t0.Add(time.Minute))
		if e.resets != 1 {
			t.Errorf("state %q: Reset told again on the next start", junk)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	d := t.TempDir()
	file := filepath.Join(d, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	badState := filepath.Join(d, "badstate")
	if err := os.MkdirAll(badState, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(badState, stateFile), []byte(`{"version":99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, state, text string
	}{
		{"textfile dir missing", filepath.Join(d, "s1"), filepath.Join(d, "missing")},
		{"textfile dir is a file", filepath.Join(d, "s2"), file},
		{"state dir under a file", filepath.Join(file, "sub"), d},
		{"state of another version", badState, d},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Open(tc.state, tc.text); err == nil {
				t.Error("Open: no error")
			}
		})
	}
}

func TestStateRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), stateFile)
	s := newState()
	s.Pods["u1"] = Pod{Namespace: "a", Name: "b", UID: "u1", NftRules: 2, Flagged: true, State: findings.StatePresent, Time: t0}
	s.Pods["u2"] = Pod{Namespace: "a", Name: "c", UID: "u2", State: findings.StateUnknown, Time: t0}
	s.Findings, s.Malformed, s.LastFinding = 7, 2, t0
	s.Checkpoint = follow.Checkpoint{Inode: 5, Offset: 9}
	if err := saveState(p, s); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-saved +loaded):\n%s", diff)
	}
}

// logrotate's copytruncate copies the file to PATH.1 and truncates it in
// place. The follower used to take the copy for new lines and count every
// line twice (findings_total 252 after 140 lines); it now recognises the
// copy by the checkpoint's first-line hash and goes on where it was.
func TestLogrotateCopytruncate(t *testing.T) {
	bin, err := exec.LookPath("logrotate")
	nstest.Need(t, err == nil && os.Geteuid() == 0, "needs logrotate (apt-get install logrotate) and root (it refuses a config not owned by root)")
	e := newEnv(t)
	conf := filepath.Join(t.TempDir(), "logrotate.conf")
	if err := os.WriteFile(conf, []byte(e.findings+" {\n  copytruncate\n  rotate 4\n  missingok\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rotate := func() {
		t.Helper()
		out, err := exec.Command(bin, "--force", "--state", filepath.Join(filepath.Dir(conf), "status"), conf).CombinedOutput()
		if err != nil {
			t.Fatalf("logrotate: %v\n%s", err, out)
		}
	}
	uid := 0
	add := func(n int) {
		for i := 0; i < n; i++ {
			uid++
			e.append(rec("team-a", fmt.Sprintf("web-%d", uid), fmt.Sprintf("u%d", uid), "", 1, 0, t0))
		}
	}
	add(100)
	e.once(t0)
	// Lines the follower has not read yet when the copy is taken: they are
	// only in the copy.
	add(40)
	rotate()
	add(10)
	c := e.once(t0)
	if f, _ := c.Counts(); f != 150 {
		t.Errorf("findings_total = %d after 150 lines and a copytruncate, want 150", f)
	}
	rotate()
	add(5)
	rotate()
	c = e.once(t0)
	if f, m := c.Counts(); f != 155 || m != 0 {
		t.Errorf("findings_total = %d, malformed %d after two more rotations, want 155, 0", f, m)
	}
	if n := len(c.Pods()); n != 155 {
		t.Errorf("%d pods, want 155", n)
	}
}

// TestStates: what each state of a pod's latest finding exports. Unknown
// is its own gauge, not zero rules; gone clears the pod's series, and an
// older line read after the gone one does not bring them back.
func TestStates(t *testing.T) {
	e := newEnv(t)
	ns := e.netns("a")
	web := rec("team-a", "web-1", "u1", ns, 3, 0, t0)
	hider := rec("team-a", "hider", "u2", e.netns("b"), 0, 0, t0)
	hider.Truncated, hider.Error, hider.State = true, "legacy x_tables busy", findings.StateUnknown
	gone := rec("team-a", "web-1", "u1", ns, 0, 0, t0.Add(time.Minute))
	gone.State = findings.StateGone
	e.append(web, hider, gone, web)
	c := e.once(t0.Add(2 * time.Minute))
	prom := e.prom()
	for _, want := range []string{
		`iptables_alerter_pod_usage_unknown{pod_name="hider",pod_namespace="team-a"} 1`,
		"iptables_alerter_flagged_pods 0",
	} {
		if !strings.Contains(prom, want+"\n") {
			t.Errorf("textfile lacks %s:\n%s", want, prom)
		}
	}
	for _, not := range []string{`pod_name="web-1"`, `iptables_alerter_pod_iptables_rules{pod_name="hider"`} {
		if strings.Contains(prom, not) {
			t.Errorf("textfile holds %s:\n%s", not, prom)
		}
	}
	if got := c.Pods(); len(got) != 1 || got[0].Name != "hider" || got[0].State != findings.StateUnknown {
		t.Errorf("pods %+v, want only hider, unknown", got)
	}
	// Usage back after the unknown record: the pod's rules, no unknown.
	back := rec("team-a", "hider", "u2", e.netns("b"), 0, 4, t0.Add(3*time.Minute))
	e.append(back)
	e.once(t0.Add(4 * time.Minute))
	prom = e.prom()
	if strings.Contains(prom, "iptables_alerter_pod_usage_unknown{") || !strings.Contains(prom, `iptables_alerter_pod_iptables_rules{backend="legacy",pod_name="hider",pod_namespace="team-a"} 4`) {
		t.Errorf("after usage was seen:\n%s", prom)
	}
}

// A state file written before states: a flagged pod is present, another
// one was kept for its inspection error and is unknown.
func TestStateFileBeforeStates(t *testing.T) {
	p := filepath.Join(t.TempDir(), stateFile)
	old := `{"version":1,"pods":{"u1":{"namespace":"a","name":"b","uid":"u1","nft_rules":2,"flagged":true},"u2":{"namespace":"a","name":"c","uid":"u2","flagged":false}}}`
	if err := os.WriteFile(p, []byte(old), 0o640); err != nil {
		t.Fatal(err)
	}
	s, err := loadState(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pods["u1"].State != findings.StatePresent || s.Pods["u2"].State != findings.StateUnknown {
		t.Errorf("states %q %q, want present, unknown", s.Pods["u1"].State, s.Pods["u2"].State)
	}
}

// TestCommandAfterUnknown: a command's own finding (the exec watch's read
// or failed write: present, no rules) says nothing of the rules, so after
// an unknown look the pod stays unknown: `iptables -L` run by a pod that
// keeps the x_tables lock busy must not clear its usage_unknown series
// and show it with zero rules.
func TestCommandAfterUnknown(t *testing.T) {
	e := newEnv(t)
	hider := rec("team-a", "hider", "u2", e.netns("b"), 0, 0, t0)
	hider.Truncated, hider.Error, hider.State = true, "legacy x_tables busy", findings.StateUnknown
	read := rec("team-a", "hider", "u2", e.netns("b"), 0, 0, t0.Add(time.Second))
	read.Source, read.State, read.Worst, read.Fingerprint = findings.SourceExec, findings.StatePresent, findings.ImpactNative, "fp-read"
	read.Exec = &findings.Exec{Argv: []string{"iptables-nft", "-L"}, Backend: "nft", Operation: "read", Exited: true}
	e.append(hider, read)
	c := e.once(t0.Add(time.Minute))
	prom := e.prom()
	if !strings.Contains(prom, `iptables_alerter_pod_usage_unknown{pod_name="hider",pod_namespace="team-a"} 1`+"\n") ||
		strings.Contains(prom, `iptables_alerter_pod_iptables_rules{backend="legacy",pod_name="hider"`) {
		t.Errorf("a read after an unknown look:\n%s", prom)
	}
	if f, _ := c.Counts(); f != 2 {
		t.Errorf("%d findings counted, want 2", f)
	}
}

// TestIncompleteLook: a present look that stopped early (truncated: a
// rule over 32 KiB hiding the later ones, the x_tables lock kept busy)
// showed the pod with its native rule and 0 legacy rules, as if complete;
// it now has pod_usage_incomplete 1 beside its counts, kept through a
// command's own finding and gone after a complete look.
func TestIncompleteLook(t *testing.T) {
	e := newEnv(t)
	ns := e.netns("a")
	cut := rec("team-a", "hider", "u1", ns, 1, 0, t0)
	cut.Truncated = true
	read := rec("team-a", "hider", "u1", ns, 0, 0, t0.Add(time.Second))
	read.Source, read.State, read.Fingerprint = findings.SourceExec, findings.StatePresent, "fp-read"
	read.Exec = &findings.Exec{Argv: []string{"iptables-nft", "-L"}, Backend: "nft", Operation: "read", Exited: true}
	e.append(cut, read)
	e.once(t0.Add(time.Minute))
	want := `iptables_alerter_pod_usage_incomplete{pod_name="hider",pod_namespace="team-a"} 1` + "\n"
	if prom := e.prom(); !strings.Contains(prom, want) || !strings.Contains(prom, `iptables_alerter_pod_iptables_rules{backend="nft",pod_name="hider",pod_namespace="team-a"} 1`) {
		t.Errorf("a cut look, then a read: want %s beside the counts:\n%s", want, prom)
	}
	e.append(rec("team-a", "hider", "u1", ns, 1, 0, t0.Add(2*time.Minute)))
	e.once(t0.Add(3 * time.Minute))
	if prom := e.prom(); strings.Contains(prom, "iptables_alerter_pod_usage_incomplete{") {
		t.Errorf("after a complete look:\n%s", prom)
	}
}

// TestPartialLookKeepsLevel: a pod seen with legacy rules that then keeps
// the x_tables lock busy gives a truncated look with only its native
// rules, or an unknown one; neither takes the legacy level back (the
// "what will break" alert would clear while the rules may be there): the
// legacy series stay, with pod_usage_incomplete, until a complete look.
// An unknown look after a native one is worse and takes effect.
func TestPartialLookKeepsLevel(t *testing.T) {
	e := newEnv(t)
	ns := e.netns("a")
	look := func(at time.Duration, nft, legacy int, impact findings.Impact) findings.Record {
		r := rec("team-a", "hider", "u1", ns, nft, legacy, t0.Add(at))
		r.Impact, r.Worst = impact, impact.Worst()
		return r
	}
	seen := look(0, 1, 3, findings.Impact{Legacy: 3, Native: 1})
	cut := look(time.Minute, 2, 0, findings.Impact{Native: 2})
	cut.Truncated, cut.Error = true, "inspect legacy tables: legacy x_tables busy"
	unknown := look(2*time.Minute, 0, 0, findings.Impact{})
	unknown.Truncated, unknown.Error, unknown.State = true, "legacy x_tables busy", findings.StateUnknown
	complete := look(3*time.Minute, 2, 0, findings.Impact{Native: 2})
	again := unknown
	again.Time = t0.Add(4 * time.Minute)
	const (
		legacyRules = `iptables_alerter_pod_iptables_rules{backend="legacy",pod_name="hider",pod_namespace="team-a"} `
		legacyLevel = `iptables_alerter_pod_rules_by_impact{impact="legacy",pod_name="hider",pod_namespace="team-a"} `
		incomplete  = `iptables_alerter_pod_usage_incomplete{pod_name="hider",pod_namespace="team-a"} 1`
		unknownPod  = `iptables_alerter_pod_usage_unknown{pod_name="hider",pod_namespace="team-a"} 1`
		flagged     = `iptables_alerter_flagged_pods_by_impact{impact=`
	)
	kept := []string{legacyRules + "3", legacyLevel + "3", flagged + `"legacy",vendor="unknown"} 1`, incomplete}
	for _, step := range []struct {
		name      string
		look      findings.Record
		want, not []string
	}{
		{"legacy look", seen, []string{legacyRules + "3", legacyLevel + "3", flagged + `"legacy",vendor="unknown"} 1`}, []string{incomplete}},
		{"truncated native-only look", cut, kept, []string{flagged + `"native"`}},
		{"unknown look", unknown, kept, []string{unknownPod, flagged + `"native"`}},
		{"complete native look", complete, []string{legacyRules + "0", legacyLevel + "0", flagged + `"native",vendor="unknown"} 1`}, []string{incomplete, flagged + `"legacy"`}},
		{"unknown look after a native one", again, []string{unknownPod}, []string{incomplete, flagged}},
	} {
		e.append(step.look)
		e.once(step.look.Time.Add(time.Second))
		prom := e.prom()
		for _, want := range step.want {
			if !strings.Contains(prom, want+"\n") {
				t.Errorf("after the %s, the textfile lacks %s:\n%s", step.name, want, prom)
			}
		}
		for _, not := range step.not {
			if strings.Contains(prom, not) {
				t.Errorf("after the %s, the textfile holds %s:\n%s", step.name, not, prom)
			}
		}
	}
}

// TestRecreatedPodGone: a pod made again under its name whose newest
// finding says gone exports nothing of the older pod of that name, whose
// netns is still there (the check could not tell it gone).
func TestRecreatedPodGone(t *testing.T) {
	// Failed before the newest per name was chosen with the gone ones:
	// the older pod's 7 legacy rules were exported, and it was flagged.
	e := newEnv(t)
	old := rec("team-a", "db-0", "u1", e.netns("a"), 0, 7, t0)
	gone := rec("team-a", "db-0", "u2", e.netns("b"), 0, 0, t0.Add(time.Minute))
	gone.State = findings.StateGone
	e.append(old, gone)
	e.once(t0.Add(2 * time.Minute))
	prom := e.prom()
	if strings.Contains(prom, `pod_name="db-0"`) || !strings.Contains(prom, "iptables_alerter_flagged_pods 0\n") {
		t.Errorf("the older db-0 exported in place of the newer, gone one:\n%s", prom)
	}
}

// TestFutureFindingHoldsNothing (helper-133 #4): a finding written while
// the node's clock ran an hour ahead (stepped back since) kept every later
// line of its pod out, its gone included, for that hour: its series
// stayed. A finding from the future holds no later one back.
func TestFutureFindingHoldsNothing(t *testing.T) {
	e := newEnv(t)
	ahead := rec("team-a", "web", "u1", e.netns("a"), 0, 1, t0.Add(time.Hour))
	gone := rec("team-a", "web", "u1", e.netns("a"), 0, 0, t0.Add(time.Second))
	gone.State = findings.StateGone
	// Two lines from the future out of order (hooks append at once): the
	// older does not replace the newer.
	earlier := rec("team-b", "api", "u2", e.netns("b"), 1, 0, t0.Add(59*time.Minute))
	later := rec("team-b", "api", "u2", e.netns("b"), 0, 1, t0.Add(time.Hour))
	e.append(ahead, gone, later, earlier)
	e.once(t0.Add(time.Minute))
	prom := e.prom()
	if strings.Contains(prom, `pod_name="web"`) {
		t.Errorf("a gone after a finding from the future:\n%s", prom)
	}
	if !strings.Contains(prom, `iptables_alerter_pod_iptables_rules{backend="legacy",pod_name="api",pod_namespace="team-b"} 1`) {
		t.Errorf("an older line from the future replaced a newer one:\n%s", prom)
	}
}

// TestCountersNeverGoDown (helper-133 #3): the textfile's counters are
// persisted so that a restart does not reset them, but the refresh
// between two saves published the lines handled since the last save,
// which a crash then forgot: findings_total went from 3 back to 0, a
// counter reset to Prometheus. The textfile publishes what was saved.
func TestCountersNeverGoDown(t *testing.T) {
	e := newEnv(t)
	counter := func() string {
		for _, l := range strings.Split(e.prom(), "\n") {
			if strings.HasPrefix(l, "iptables_alerter_findings_total ") {
				return strings.TrimPrefix(l, "iptables_alerter_findings_total ")
			}
		}
		return ""
	}
	c, err := Open(e.state, e.text)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := c.Consume(context.Background(), rec("team-a", "web", "u1", e.netns("a"), 0, 1, t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	before := counter()
	// Killed before its next save: the state on disk has none of them.
	c, err = Open(e.state, e.text)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Refresh(); err != nil {
		t.Fatal(err)
	}
	if after := counter(); after < before {
		t.Errorf("findings_total %s before the crash, %s after it", before, after)
	}
}
