package scan

import (
	"errors"
	"fmt"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

var testMeta = Meta{Node: "node-1", Source: "hook", Stage: "poststart", ContainerID: "c1", SandboxID: "sb1",
	Pod: findings.Pod{Namespace: "team-a", Name: "web-1", UID: "u1"}, Container: "app", Image: "img", Netns: "/run/netns/x"}

func usage(rules int) classify.Usage {
	return classify.Usage{Chains: []classify.Chain{{Family: inspect.IP, Table: "filter", Name: "INPUT", Rules: rules, Sum: uint64(rules)}}}
}

var deadline = fmt.Errorf("list rules: %w", inspect.ErrDeadline)

// TestDecide: what is recorded for each kind of scan. Pure: no root, runs
// under -short.
func TestDecide(t *testing.T) {
	tests := []struct {
		name      string
		res       Result
		record    bool
		truncated bool
		err       string
		rules     int
		state     findings.State
	}{
		{name: "complete and clean", res: Result{}, record: false, state: findings.StateGone},
		{name: "complete, everything allowlisted", res: Result{Usage: classify.Usage{}, Allowed: allowlist.Result{Count: 3}}, record: false, state: findings.StateGone},
		{name: "complete with usage", res: Result{Usage: usage(2)}, record: true, rules: 2, state: findings.StatePresent},
		{name: "usage and a broken allowlist", res: Result{Usage: usage(2), AllowErr: errors.New("bad file")}, record: true, rules: 2, state: findings.StatePresent},
		{name: "deadline, nothing seen yet", res: Result{Usage: classify.Usage{Truncated: true}, Err: deadline},
			record: true, truncated: true, err: deadline.Error(), state: findings.StateUnknown},
		{name: "error without truncated flag, nothing seen", res: Result{Err: errors.New("list chains: EPERM")},
			record: true, truncated: true, err: "list chains: EPERM", state: findings.StateUnknown},
		{name: "size bound cut the dump, nothing seen", res: Result{Usage: classify.Usage{Truncated: true}},
			record: true, truncated: true, state: findings.StateUnknown},
		{name: "deadline after some usage", res: Result{Usage: func() classify.Usage { u := usage(7); u.Truncated = true; return u }(), Err: deadline},
			record: true, truncated: true, err: deadline.Error(), rules: 7, state: findings.StatePresent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(testMeta, tc.res)
			if d.Clean() == tc.record {
				t.Fatalf("clean = %v, want %v (why %q)", d.Clean(), !tc.record, d.Why)
			}
			if d.Clean() && d.Why == "" {
				t.Error("a clean look and no reason given")
			}
			r := d.Record
			if r.Truncated != tc.truncated || r.Error != tc.err || r.Nft.Rules != tc.rules || r.State != tc.state {
				t.Errorf("got truncated=%v error=%q rules=%d state=%q, want %v %q %d %q", r.Truncated, r.Error, r.Nft.Rules, r.State, tc.truncated, tc.err, tc.rules, tc.state)
			}
			if r.Pod != testMeta.Pod || r.Node != "node-1" || r.Source != "hook" || r.Stage != "poststart" || r.SandboxID != "sb1" ||
				r.ContainerID != "c1" || r.Container != "app" || r.Image != "img" || r.Netns != "/run/netns/x" || len(r.Fingerprint) != 32 {
				t.Errorf("metadata not carried into the record: %+v", r)
			}
		})
	}
}

// TestDecideFingerprints: the per-sandbox memory compares fingerprints, so
// they decide what is deduplicated. The same usage gives the same one; an
// incomplete view never gives the fingerprint of a complete one, so the
// complete finding a later scan makes is not skipped.
func TestDecideFingerprints(t *testing.T) {
	fp := func(res Result) string { return Decide(testMeta, res).Record.Fingerprint }
	complete := fp(Result{Usage: usage(3)})
	if again := fp(Result{Usage: usage(3)}); again != complete {
		t.Errorf("same usage, different fingerprints %s %s", complete, again)
	}
	if other := fp(Result{Usage: usage(4)}); other == complete {
		t.Errorf("different usage, same fingerprint %s", other)
	}
	cut := usage(3)
	cut.Truncated = true
	// The deadline may fall after every rule was seen: same counts, still
	// not the complete finding.
	partial := fp(Result{Usage: cut, Err: deadline})
	if partial == complete {
		t.Errorf("an incomplete scan that saw all rules has the complete scan's fingerprint %s", partial)
	}
	if again := fp(Result{Usage: cut, Err: deadline}); again != partial {
		t.Errorf("the same incomplete view twice: fingerprints %s %s, want one (no flood of repeats)", partial, again)
	}
	empty := fp(Result{Usage: classify.Usage{Truncated: true}, Err: deadline})
	if empty == partial || empty == complete {
		t.Errorf("an incomplete empty view shares a fingerprint with another view: %s", empty)
	}
}

// TestDecideParts: the parts a look read whole are fingerprinted alone, so
// the record step can compare a look the x_tables mutex cut short with the
// complete one before it; a look that does not say which part it missed
// read none whole.
func TestDecideParts(t *testing.T) {
	withLegacy := func(u classify.Usage) classify.Usage {
		u.Legacy = []classify.Legacy{{Family: inspect.IP, Table: "nat", Rules: 2, Sum: 7}}
		return u
	}
	whole := Decide(testMeta, Result{Usage: withLegacy(usage(3))}).Parts
	if !whole.Whole() {
		t.Fatalf("complete look: parts %+v, want both", whole)
	}
	busy := usage(3)
	busy.Truncated, busy.LegacyPartial = true, true
	d := Decide(testMeta, Result{Usage: busy, Err: fmt.Errorf("read legacy tables: %w", inspect.ErrLegacyBusy)})
	if d.Parts.Nft != whole.Nft || d.Parts.Legacy != "" || d.Record.State != findings.StatePresent || !d.Record.Truncated {
		t.Errorf("legacy unread: parts %+v, record %s truncated %v; want the complete look's nft part %s, no legacy part, present, truncated",
			d.Parts, d.Record.State, d.Record.Truncated, whole.Nft)
	}
	if d.Record.Fingerprint == Decide(testMeta, Result{Usage: withLegacy(usage(3))}).Record.Fingerprint {
		t.Error("a partial look has the complete look's fingerprint")
	}
	other := Decide(testMeta, Result{Usage: withLegacy(usage(4))}).Parts
	if other.Nft == whole.Nft || other.Legacy != whole.Legacy {
		t.Errorf("one more nft rule: parts %+v, want the nft part alone to differ from %+v", other, whole)
	}
	edited := usage(3)
	edited.Legacy = []classify.Legacy{{Family: inspect.IP, Table: "nat", Rules: 2, Sum: 8}}
	if p := Decide(testMeta, Result{Usage: edited}).Parts; p.Legacy == whole.Legacy || p.Nft != whole.Nft {
		t.Errorf("a legacy rule edited in place (same count, other content): parts %+v, want the legacy part alone to differ from %+v", p, whole)
	}
	if p := Decide(testMeta, Result{Usage: usage(3), Err: errors.New("list chains: EPERM")}).Parts; p != (findings.Parts{}) {
		t.Errorf("an error that names no part: parts %+v, want none", p)
	}
}

// TestDecideNode: a node's record, whatever it holds, names no pod's
// sandbox or container: the Meta's sandbox id is the memory's key.
func TestDecideNode(t *testing.T) {
	m := testMeta
	m.Subject, m.SandboxID, m.Pod = findings.SubjectNode, "node", findings.Pod{}
	for _, res := range []Result{{Usage: usage(1)}, {}, {Err: deadline}} {
		r := Decide(m, res).Record
		if r.Subject != findings.SubjectNode || r.SandboxID != "" || r.ContainerID != "" || r.Container != "" || r.Node != "node-1" {
			t.Errorf("node record (%s): %+v, want subject node, no sandbox or container", r.State, r)
		}
	}
}

// TestManyTablesWhole: a pod with more nftables tables than a record
// lists (40, the list holds 32) was recorded truncated, as a look cut
// short: its counts were whole, yet the node label, the agent's usage,
// the textfile and the Reports kept a worse level seen before for good
// (a pod that removed its legacy rules stayed "breaks") and
// pod_usage_incomplete fired. Its lists are now cut (ListsCut), and the
// look is complete.
func TestManyTablesWhole(t *testing.T) {
	var u classify.Usage
	for i := range 40 {
		u.Chains = append(u.Chains, classify.Chain{Family: inspect.IP, Table: fmt.Sprintf("t%02d", i), Name: "INPUT", Rules: 1, Sum: uint64(i)})
	}
	rec := Build(testMeta, Result{Usage: u})
	if rec.Truncated || rec.Partial() || !rec.ListsCut || rec.Nft.Rules != 40 || len(rec.Nft.Tables) >= 40 || rec.KnownState() != findings.StatePresent {
		t.Errorf("40 tables: truncated %v, partial %v, lists cut %v, %d rules, %d tables listed, state %s",
			rec.Truncated, rec.Partial(), rec.ListsCut, rec.Nft.Rules, len(rec.Nft.Tables), rec.KnownState())
	}
}
