package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// TestEveryLooked: the agent says it looked at every pod only once a
// sweep listed them since the connection, each listed or started pod's
// last scan completed, and none was left out.
func TestEveryLooked(t *testing.T) {
	k := newSandboxes()
	meta := func(id string) scan.Meta { return scan.Meta{SandboxID: id} }
	var since time.Time
	check := func(step string, wantPods int, want bool) {
		t.Helper()
		pods, s, ok := k.everyLooked()
		if ok != want || pods != wantPods {
			t.Errorf("%s: everyLooked = %d, %v; want %d, %v", step, pods, ok, wantPods, want)
		}
		if ok && (s.Before(since) || s.After(time.Now())) {
			t.Errorf("%s: since %v, want from %v to now", step, s, since)
		}
		if ok {
			since = s
		}
	}
	check("no sweep yet", 0, false)
	k.list([]scan.Meta{meta("a"), meta("b")}, nil, true)
	check("listed, not scanned", 0, false)
	k.scanned("a", inspect.State{}, true, k.begin("a"))
	check("one scanned", 0, false)
	k.scanned("b", inspect.State{}, false, k.begin("b"))
	check("one scan incomplete", 0, false)
	k.scanned("b", inspect.State{}, true, k.begin("b"))
	check("both complete", 2, true)
	// A container of a starts (its init may write rules) while a scan of
	// a runs: neither a's last scan nor that one, which read the rules
	// from before, vouches for it; a scan begun after the start does.
	// (Failed before: the start left a complete, and a scan running
	// across it made it complete.)
	began := k.begin("a")
	k.touch("a")
	check("a's container started", 0, false)
	k.scanned("a", inspect.State{}, true, began)
	check("a's scan begun before the start ended", 0, false)
	k.scanned("a", inspect.State{}, true, k.begin("a"))
	check("a's scan begun after the start ended", 2, true)
	k.add(meta("c"))
	check("a pod started since", 0, false)
	k.ended("c")
	check("that pod stopped", 2, true)
	// A netns the agent cannot open: not looked at until a scan opens
	// it, the runtime says it stopped, or a sweep no longer lists it.
	// (Failed before sandboxes kept the unseen: a pod started unseen, or
	// forgotten by the re-sweep, left the word true.)
	k.markUnseen("a")
	check("a's netns not opened", 0, false)
	if blind, _ := k.blind(); !blind {
		t.Error("not blind with a unseen: the word would only lapse")
	}
	if k.unchanged("a", inspect.State{}) {
		t.Error("a, unseen, would be skipped by the re-sweep as unchanged")
	}
	before := time.Now()
	k.scanned("a", inspect.State{}, true, k.begin("a"))
	check("a's netns opened again", 2, true)
	if _, s, _ := k.everyLooked(); s.Before(before) {
		t.Errorf("since %v, not moved by the scan at %v", s, before)
	}
	// A pod started whose netns was never opened: known (queueOpen adds
	// it), so the re-sweep tries again; its container's stop finding the
	// netns gone does not end it, the runtime's pod stop does. (Failed
	// before: not known, and forgotten at a container's stop.)
	k.add(meta("d"))
	k.markUnseen("d")
	check("d started, its netns never opened", 0, false)
	k.forget("d")
	check("d's container stopped, its netns gone to the agent", 0, false)
	k.ended("d")
	check("d stopped", 2, true)
	// A re-sweep's vanished netns marks the pod unseen, unless it ended
	// meanwhile.
	k.add(meta("e"))
	if !k.vanish("e") {
		t.Error("vanish of a known pod: false")
	}
	check("e vanished from the agent's view", 0, false)
	k.list([]scan.Meta{meta("a"), meta("b")}, nil, false)
	check("e not listed any more", 2, true)
	k.add(meta("f"))
	k.ended("f")
	if k.vanish("f") {
		t.Error("vanish of an ended pod: true")
	}
	k.markUnseen("f")
	check("f's stop raced its scans", 2, true)
	k.list([]scan.Meta{meta("a"), meta("b")}, []string{"g"}, false)
	check("g listed, its status not read", 0, false)
	k.list([]scan.Meta{meta("a"), meta("b")}, nil, false)
	k.unlist()
	check("connection lost", 0, false)
	// The CRI fallback's list keeps the scans: it skips unchanged pods.
	k.list([]scan.Meta{meta("a"), meta("b")}, nil, false)
	check("CRI listed again, scans remembered", 2, true)
	// NRI's Synchronize after a reconnect does not: a container may have
	// restarted and written rules while the agent was not connected.
	// (Failed before: the word vouched at once, with a new since, before
	// the sweep's scans ran.)
	k.unlist()
	k.list([]scan.Meta{meta("a"), meta("b")}, nil, true)
	check("synchronized again, not scanned since", 0, false)
	k.scanned("a", inspect.State{}, true, k.begin("a"))
	k.scanned("b", inspect.State{}, true, k.begin("b"))
	check("synchronized again, both scanned since", 2, true)

	many := make([]scan.Meta, maxKnown+1)
	for i := range many {
		many[i] = meta(fmt.Sprint(i))
	}
	k.list(many, nil, true)
	for i := range many {
		k.scanned(fmt.Sprint(i), inspect.State{}, true, k.begin(fmt.Sprint(i)))
	}
	check("past maxKnown", 0, false)
	k.list(many[:maxKnown], nil, true)
	for _, m := range many[:maxKnown] {
		k.scanned(m.SandboxID, inspect.State{}, true, k.begin(m.SandboxID))
	}
	check("at maxKnown", maxKnown, true)
	k.add(meta("one more"))
	check("one more started past maxKnown", 0, false)

	k.list(nil, nil, true)
	k.watchNode(scan.Meta{SandboxID: nodeKey})
	check("node mode, the node's netns not scanned", 0, false)
	k.scanned(nodeKey, inspect.State{}, true, k.begin(nodeKey))
	check("node mode, the node's netns scanned", 0, true)
}

// TestSynchronizeNeedsScans: after a reconnect, the runtime's Synchronize
// does not bring the word back before the sweep's scan of each pod ran: a
// container may have restarted and written rules while the agent was not
// connected. Proven by order: the sweep's scan is held. (Failed before:
// the list kept each pod's last scan as complete, and the word vouched at
// once with a new since.)
func TestSynchronizeNeedsScans(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	rec := newRecorder()
	a := startAgent(t, t.TempDir(), rec)
	ns := nstest.New(t)
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{pod("a", ns.Path())}, nil); err != nil {
		t.Fatal(err)
	}
	release(a, 1)
	rec.wait(t, 1)
	if _, _, ok := a.known.everyLooked(); !ok {
		t.Fatal("not every pod looked at after the first sweep's scan")
	}
	a.connection(false, errors.New("runtime restarted"))
	// Written while the agent was not connected: nobody heard it.
	ns.Run("iptables-nft", "-A", "INPUT", "-j", "DROP")
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{pod("a", ns.Path())}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.known.everyLooked(); ok {
		t.Error("every pod looked at after the reconnect's Synchronize, before its sweep's scan ran")
	}
	release(a, 1)
	if s := rec.wait(t, 1)[0]; s.Stored != findings.Recorded {
		t.Fatalf("the sweep's scan: %s, want the rule written meanwhile recorded", s.Label())
	}
	if _, _, ok := a.known.everyLooked(); !ok {
		t.Error("not every pod looked at after the sweep's scan")
	}
}

// TestContainerStartNeedsScan: a container of a pod looked at starts (its
// init may write rules): the word waits for the start's scan. Proven by
// order: that scan is held. (Failed before: the pod stayed complete, and
// the word vouched for rules nobody had read.)
func TestContainerStartNeedsScan(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	rec := newRecorder()
	a := startAgent(t, t.TempDir(), rec)
	ns := nstest.New(t)
	ctx := context.Background()
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{pod("a", ns.Path())}, nil); err != nil {
		t.Fatal(err)
	}
	release(a, 1)
	rec.wait(t, 1)
	if _, _, ok := a.known.everyLooked(); !ok {
		t.Fatal("not every pod looked at after the sweep's scan")
	}
	// The restarted container's init writes a rule.
	ns.Run("iptables-nft", "-A", "INPUT", "-j", "DROP")
	if err := a.PostStartContainer(ctx, pod("a", ns.Path()), &api.Container{Id: "c2", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := a.known.everyLooked(); ok {
		t.Error("every pod looked at while the started container's scan waits")
	}
	release(a, 1)
	if s := rec.wait(t, 1)[0]; s.Stored != findings.Recorded {
		t.Fatalf("the start's scan: %s, want the init's rule recorded", s.Label())
	}
	if _, _, ok := a.known.everyLooked(); !ok {
		t.Error("not every pod looked at after the start's scan")
	}
}

// TestLegacyBlind: re-sweeps that find the host-wide x_tables mutex
// held leave the pods behind it unread, and nothing else sees a legacy
// write: one busy re-sweep passes (the next comes sooner), but a
// re-sweep interval of them takes the word back, at once (blind), until
// a re-sweep gets past the mutex. (Failed before: the word vouched for
// as long as the mutex was held.)
func TestLegacyBlind(t *testing.T) {
	k := newSandboxes()
	k.list([]scan.Meta{{SandboxID: "a"}}, nil, true)
	k.scanned("a", inspect.State{}, true, k.begin("a"))
	looked := func(step string, want bool) {
		t.Helper()
		if _, _, ok := k.everyLooked(); ok != want {
			t.Errorf("%s: everyLooked %v, want %v", step, ok, want)
		}
		if blind, _ := k.blind(); blind == want {
			t.Errorf("%s: blind %v, want %v (the word taken back at once)", step, blind, !want)
		}
	}
	const interval = 10 * time.Minute
	t0 := time.Now()
	looked("before", true)
	for i, at := range []time.Duration{0, interval / 8, interval / 2, interval - time.Second} {
		if k.noteBusy(true, t0.Add(at), interval) {
			t.Errorf("busy re-sweep %d, %v after the first: blind already", i, at)
		}
		looked(fmt.Sprintf("busy re-sweep %d", i), true)
	}
	looked("busy for less than an interval", true)
	if !k.noteBusy(true, t0.Add(interval), interval) {
		t.Error("busy for an interval: not blind")
	}
	looked("busy for an interval", false)
	if k.noteBusy(true, t0.Add(interval+interval/8), interval) {
		t.Error("busy again: told it became blind again (it is told once)")
	}
	looked("busy still", false)
	if k.noteBusy(false, t0.Add(interval+interval/4), interval) {
		t.Error("a re-sweep got past the mutex: told it became blind")
	}
	looked("a re-sweep got past", true)
	// The count starts again.
	if k.noteBusy(true, t0.Add(2*interval), interval) {
		t.Error("the first busy re-sweep after one got past: blind")
	}
	looked("the first busy re-sweep after one got past", true)
}
