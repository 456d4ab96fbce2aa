package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/execwatch"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// resweepRecorder is a recorder that hears the re-sweeps too.
type resweepRecorder struct {
	*recorder
	sweeps chan Resweep
}

func (r resweepRecorder) Resweeped(s Resweep) { r.sweeps <- s }

var _ ResweepObserver = resweepRecorder{}

// startResweeping is startAgentWith with a recorder of the re-sweeps.
func startResweeping(t *testing.T, change func(*Config)) (*Agent, resweepRecorder) {
	t.Helper()
	rec := resweepRecorder{newRecorder(), make(chan Resweep, 10)}
	return startAgentWith(t, t.TempDir(), rec, change), rec
}

// resweepOnce runs one re-sweep and returns its report.
func resweepOnce(t *testing.T, a *Agent, rec resweepRecorder) Resweep {
	t.Helper()
	a.resweep(context.Background())
	return receive(t, rec.sweeps, "re-sweep report")
}

// scannedIDs lets n scans run and returns their sandboxes, sorted.
func scannedIDs(t *testing.T, a *Agent, rec resweepRecorder, n int) ([]string, []Scan) {
	t.Helper()
	release(a, n)
	scans := rec.wait(t, n)
	var ids []string
	for _, s := range scans {
		ids = append(ids, s.Meta.SandboxID)
	}
	slices.Sort(ids)
	return ids, scans
}

// manyChains is an nft script making more chains than a scan tracks
// (inspect's 8192): every scan of the netns ends truncated, its finding's
// state unknown.
func manyChains() string {
	var b strings.Builder
	b.WriteString("add table inet big\n")
	for i := 0; i < 8300; i++ {
		fmt.Fprintf(&b, "add chain inet big c%d\n", i)
	}
	return b.String()
}

// TestResweep: after the registration sweep, a re-sweep scans only the
// pod whose last scan could not finish; after rules change, exactly the
// pods whose nftables (iptables-nft, native nft) or legacy tables
// (iptables-legacy -R, which keeps the table's size) changed, plus that
// one; the others are skipped. A stopped sandbox is forgotten, and one
// whose netns is gone is forgotten by the re-sweep.
func TestResweep(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy", "nft")
	nstest.NeedIPTables(t)
	a, rec := startResweeping(t, func(*Config) {})
	ns := map[string]*nstest.NS{}
	for _, id := range []string{"clean", "legacy", "native", "nft", "same", "unknown"} {
		ns[id] = nstest.New(t)
	}
	ns["same"].Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	ns["nft"].Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	ns["legacy"].Run("iptables-legacy", "-A", "OUTPUT", "-s", "10.0.0.1", "-j", "ACCEPT")
	ns["unknown"].Restore(manyChains(), "nft", "-f", "-")
	var pods []*api.PodSandbox
	for id, n := range ns {
		pods = append(pods, pod(id, n.Path()))
	}
	if _, err := a.Synchronize(context.Background(), pods, nil); err != nil {
		t.Fatal(err)
	}
	_, scans := scannedIDs(t, a, rec, len(pods))
	for _, s := range scans {
		if id := s.Meta.SandboxID; (id == "unknown") != (s.Record != nil && s.Record.Truncated) {
			t.Fatalf("registration sweep: %s: %+v (record %+v), want only the unknown pod's truncated", id, s, s.Record)
		}
	}

	// Nothing changed: only the pod whose last scan did not finish.
	if r := resweepOnce(t, a, rec); r.Known != 6 || r.Skipped != 5 || r.Queued != 1 {
		t.Fatalf("first re-sweep: %+v, want 6 known, 5 skipped, 1 queued", r)
	}
	ids, scans := scannedIDs(t, a, rec, 1)
	if ids[0] != "unknown" || scans[0].Meta.Source != SourceSweep || scans[0].Meta.Stage != StageResweep {
		t.Fatalf("first re-sweep scanned %+v, want the unknown pod, source sweep, stage %s", scans[0].Meta, StageResweep)
	}

	ns["nft"].Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "81", "-j", "DROP")
	ns["native"].Run("nft", "add table inet mine")
	ns["legacy"].Run("iptables-legacy", "-R", "OUTPUT", "1", "-s", "10.0.0.2", "-j", "ACCEPT")
	if r := resweepOnce(t, a, rec); r.Skipped != 2 || r.Queued != 4 {
		t.Fatalf("re-sweep after changes: %+v, want 2 skipped, 4 queued", r)
	}
	ids, scans = scannedIDs(t, a, rec, 4)
	if want := []string{"legacy", "native", "nft", "unknown"}; !slices.Equal(ids, want) {
		t.Fatalf("re-sweep after changes scanned %v, want %v", ids, want)
	}
	for _, s := range scans {
		if s.Meta.SandboxID == "nft" && s.Stored != findings.Recorded {
			t.Errorf("the nft pod's new rule: %+v, want recorded", s)
		}
	}

	// A stopped sandbox is forgotten; a netns gone unseen too.
	if err := a.StopPodSandbox(context.Background(), pod("clean", ns["clean"].Path())); err != nil {
		t.Fatal(err)
	}
	scannedIDs(t, a, rec, 1)
	ns["same"].Delete()
	if r := resweepOnce(t, a, rec); r.Known != 5 || r.Gone != 1 || r.Skipped != 3 || r.Queued != 1 {
		t.Fatalf("re-sweep after a stop and a netns gone: %+v, want 5 known, 1 gone, 3 skipped, 1 queued", r)
	}
	scannedIDs(t, a, rec, 1)
	if r := resweepOnce(t, a, rec); r.Known != 4 {
		t.Fatalf("re-sweep after the gone netns: %+v, want it forgotten", r)
	}
	scannedIDs(t, a, rec, 1)
	checkHandlers(t, rec.recorder)
}

// TestResweepCRI: the CRI fallback's sweep skips what the re-sweep skips:
// its first sweep scans every pod, the next only those changed.
func TestResweepCRI(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	a, rec := startResweeping(t, func(*Config) {})
	used, clean := nstest.New(t), nstest.New(t)
	used.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	jobs := func() []job {
		var jobs []job
		for id, n := range map[string]*nstest.NS{"used": used, "clean": clean} {
			jobs = append(jobs, job{meta: scan.Meta{Node: "node-1", Source: SourceSweep, Stage: StageCRI, SandboxID: id, Netns: n.Path()}})
		}
		return jobs
	}
	sweep := func() Resweep {
		t.Helper()
		a.sweepChanged(context.Background(), jobs(), nil, 2)
		return <-rec.sweeps
	}
	if r := sweep(); r.Stage != StageCRI || r.Skipped != 0 || r.Queued != 2 {
		t.Fatalf("first CRI sweep: %+v, want both queued", r)
	}
	scannedIDs(t, a, rec, 2)
	if r := sweep(); r.Skipped != 2 || r.Queued != 0 {
		t.Fatalf("second CRI sweep: %+v, want both skipped", r)
	}
	clean.Run("iptables-nft", "-A", "INPUT", "-j", "ACCEPT")
	if r := sweep(); r.Skipped != 1 || r.Queued != 1 {
		t.Fatalf("CRI sweep after a change: %+v, want 1 skipped, 1 queued", r)
	}
	if ids, _ := scannedIDs(t, a, rec, 1); ids[0] != "clean" {
		t.Fatalf("CRI sweep after a change scanned %v, want the changed pod", ids)
	}
}

// TestResweepBusy: a pod holding the host-wide x_tables mutex can neither
// stall the re-sweep nor make it a record storm. Proven by order, not
// time: the re-sweep returns while the pod still holds the mutex. With the
// mutex held during one re-sweep of two: that re-sweep backs off (no State
// readable, nothing queued, all left for later); container starts of the
// other pods then give looks without their legacy part, which write
// nothing where the part they read is as recorded (the pod with
// iptables-nft rules, the pod with legacy rules); a clean pod's partial
// look is unknown, and once the mutex is free the complete look writes
// the gone that resolves it. Records are counted in the findings file.
func TestResweepBusy(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy", "iptables-legacy-restore")
	nstest.NeedIPTables(t)
	a, rec := startResweeping(t, func(cfg *Config) { cfg.ScanTimeout = 500 * time.Millisecond })
	x, y, l, holder := nstest.New(t), nstest.New(t), nstest.New(t), nstest.New(t)
	x.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	l.Run("iptables-legacy", "-A", "OUTPUT", "-s", "10.0.0.1", "-j", "ACCEPT")
	ctx := context.Background()
	pods := map[string]*nstest.NS{"x": x, "y": y, "l": l}
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{pod("x", x.Path()), pod("y", y.Path()), pod("l", l.Path())}, nil); err != nil {
		t.Fatal(err)
	}
	scannedIDs(t, a, rec, 3)
	// records is the findings file's states by sandbox, in order.
	records := func() map[string][]findings.State {
		out := map[string][]findings.State{}
		for _, r := range findingstest.Read(t, a.cfg.Log.Path) {
			out[r.SandboxID] = append(out[r.SandboxID], r.KnownState())
		}
		return out
	}
	if got := records(); len(got["x"]) != 1 || len(got["l"]) != 1 || len(got["y"]) != 0 {
		t.Fatalf("after the first sweep: records %v, want one for x and l, none for y", got)
	}

	stop := nstest.HoldXTMutexIn(t, holder)
	if err := a.PostStartContainer(ctx, pod("holder", holder.Path()), &api.Container{Id: "c1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	if _, scans := scannedIDs(t, a, rec, 1); scans[0].Record == nil || !scans[0].Record.Truncated {
		t.Fatalf("holder's scan while it holds the mutex: %+v, want a truncated finding", scans[0])
	}
	if r := resweepOnce(t, a, rec); r.Known != 4 || r.Queued != 0 || r.Busy != 4 {
		t.Fatalf("re-sweep while the holder holds the mutex: %+v, want all 4 left for later (busy), none queued", r)
	}
	for id, ns := range pods {
		if err := a.PostStartContainer(ctx, pod(id, ns.Path()), &api.Container{Id: "c2-" + id, Name: "sidecar"}); err != nil {
			t.Fatal(err)
		}
	}
	_, scans := scannedIDs(t, a, rec, 3)
	for _, s := range scans {
		if id := s.Meta.SandboxID; id != "y" && s.Stored != findings.Same {
			t.Errorf("%s's scan while the mutex is held: %+v (record %+v), want same: the part it read is as recorded", id, s, s.Record)
		}
	}
	stop()
	for end := time.Now().Add(60 * time.Second); ; {
		r := resweepOnce(t, a, rec)
		scannedIDs(t, a, rec, r.Queued)
		// The holder is queued while its table is too big to read by the
		// deadline, skipped once a look read it whole (a quiet machine).
		if r.Skipped == 3 && r.Queued == 1 || r.Skipped == 4 && r.Queued == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("60 s after the mutex was freed: %+v, want x, y and l skipped, the holder queued or skipped", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := records()
	if len(got["x"]) != 1 || len(got["l"]) != 1 {
		t.Errorf("records %v: want still one each for x and l (nothing of theirs changed)", got)
	}
	if n := len(got["y"]); n > 2 || n > 0 && got["y"][n-1] != findings.StateGone {
		t.Errorf("clean pod's records %v: want none, or its unknown and the gone resolving it", got["y"])
	}
	// The holder's table is big: a look at it stops short (the same
	// partial view each time, no record) until, on a machine quiet enough,
	// one reads it whole and records the usage that resolves the first.
	if h := got["holder"]; len(h) < 1 || len(h) > 2 || len(h) == 2 && h[1] != findings.StatePresent {
		t.Errorf("holder's records %v: want its first partial look's, and at most the present of a complete look after it", h)
	}
}

// TestNextResweep: after a re-sweep that found the x_tables mutex busy the
// next comes after an eighth of the interval; after one that was not, the
// interval.
func TestNextResweep(t *testing.T) {
	const iv = 10 * time.Minute
	if w := nextResweep(iv, true); w != iv/8 {
		t.Errorf("after a busy re-sweep: %v, want %v", w, iv/8)
	}
	if w := nextResweep(iv, false); w != iv {
		t.Errorf("after a re-sweep that was not busy: %v, want %v", w, iv)
	}
	if w := nextResweep(time.Second, true); w != time.Second {
		t.Errorf("a 1 s interval, busy: %v, want 1 s", w)
	}
}

// TestResweepAfterStop: a re-sweep's scan queued while the sandbox's stop
// is being scanned does not run after it (the stop's is the pod's last
// scan). Proven by order: the stop's scan is taken and held, the
// re-sweep queues its scan behind it, then another pod's event behind
// that; after the stop, the next scan reported is the other pod's.
func TestResweepAfterStop(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	a, rec := startResweeping(t, func(*Config) {})
	ns, other := nstest.New(t), nstest.New(t)
	ctx := context.Background()
	p := pod("stopping", ns.Path())
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{p}, nil); err != nil {
		t.Fatal(err)
	}
	scannedIDs(t, a, rec, 1)

	if err := a.StopPodSandbox(ctx, p); err != nil {
		t.Fatal(err)
	}
	// A worker holds the stop's scan (taken, waiting for its token).
	for running := false; !running; time.Sleep(time.Millisecond) {
		a.queue.mu.Lock()
		s := a.queue.slots[p.Id]
		running = s != nil && s.running
		a.queue.mu.Unlock()
	}
	ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	if r := resweepOnce(t, a, rec); r.Queued != 1 {
		t.Fatalf("re-sweep during the stop's scan: %+v, want the changed pod queued", r)
	}
	o := pod("other", other.Path())
	if err := a.PostStartContainer(ctx, o, &api.Container{Id: "c-other", Name: "app", PodSandboxId: o.Id}); err != nil {
		t.Fatal(err)
	}
	if _, scans := scannedIDs(t, a, rec, 1); scans[0].Meta.Stage != stageStopPod {
		t.Fatalf("first scan %+v, want the stop's", scans[0].Meta)
	}
	if _, scans := scannedIDs(t, a, rec, 1); scans[0].Meta.SandboxID != "other" {
		t.Fatalf("after the stop: scan %+v, want the other pod's (the stopped pod's re-sweep scan skipped)", scans[0].Meta)
	}
	if r := resweepOnce(t, a, rec); r.Known != 1 || r.Skipped != 1 {
		t.Fatalf("re-sweep after the stop: %+v, want only the other pod known, and skipped", r)
	}
}

// lossSweepRecorder hears the exec watch's losses and the re-sweeps.
type lossSweepRecorder struct {
	resweepRecorder
	lost chan ExecLosses
}

func (l lossSweepRecorder) ExecLost(x ExecLosses) { l.lost <- x }
func (l lossSweepRecorder) ExecOff(error)         {}

// TestResweepAfterExecLosses: with the re-sweep an hour away, an exec
// watch loss that may hide a legacy write (an iptables command gone
// before it was read) brings a re-sweep at once, which finds the legacy
// rule written meanwhile; a loss only where no watched sandbox is brings
// none.
func TestResweepAfterExecLosses(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	nstest.NeedIPTables(t)
	rec := lossSweepRecorder{resweepRecorder{newRecorder(), make(chan Resweep, 10)}, make(chan ExecLosses, 10)}
	a := startAgentWith(t, t.TempDir(), rec, func(c *Config) { c.ResweepInterval = time.Hour })
	ns := nstest.New(t)
	if _, err := a.Synchronize(context.Background(), []*api.PodSandbox{pod("p", ns.Path())}, nil); err != nil {
		t.Fatal(err)
	}
	scannedIDs(t, a, rec.resweepRecorder, 1)
	// Written by a command the exec watch lost: nothing else tells.
	ns.Run("iptables-legacy", "-A", "OUTPUT", "-s", "10.0.0.1", "-j", "ACCEPT")

	losses := func(c execwatch.Command, why string) ExecLosses {
		t.Helper()
		a.execMissed(c, why)
		a.reportLosses()
		return receive(t, rec.lost, "loss report")
	}
	if l := losses(execwatch.Command{PID: 43, Argv: []string{"iptables-legacy", "-S"}}, missNowhere); l.Resweep {
		t.Errorf("a loss in no watched sandbox's netns: %+v, want no re-sweep", l)
	}
	if l := losses(execwatch.Command{PID: 42, Argv: []string{"iptables-legacy"}}, missGone); !l.Resweep {
		t.Errorf("a tool gone before read: %+v, want a re-sweep", l)
	}
	if r := receive(t, rec.sweeps, "re-sweep after the loss"); r.Known != 1 || r.Queued != 1 {
		t.Fatalf("re-sweep after the loss: %+v, want the pod queued", r)
	}
	_, scans := scannedIDs(t, a, rec.resweepRecorder, 1)
	if s := scans[0]; s.Meta.Stage != StageResweep || s.Record == nil || s.Record.Legacy.Rules != 1 || s.Stored != findings.Recorded {
		t.Errorf("re-sweep's scan: %+v (record %+v), want the legacy rule recorded", s, s.Record)
	}
}

// TestResweepAfterLimited: a scan whose finding the sandbox's limit
// dropped is not a complete look to skip from: the next re-sweep scans the
// pod again (without the watch nothing else would), until a finding of
// its usage is stored.
func TestResweepAfterLimited(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	nstest.NeedIPTables(t)
	a, rec := startResweeping(t, func(cfg *Config) { cfg.Seen.Limit, cfg.Seen.Interval = 1, time.Hour })
	ns := nstest.New(t)
	ns.Run("iptables-legacy", "-A", "OUTPUT", "-s", "10.0.0.1", "-j", "ACCEPT")
	if _, err := a.Synchronize(context.Background(), []*api.PodSandbox{pod("busy", ns.Path())}, nil); err != nil {
		t.Fatal(err)
	}
	if _, scans := scannedIDs(t, a, rec, 1); scans[0].Stored != findings.Recorded {
		t.Fatalf("sweep: %s, want recorded", scans[0].Label())
	}
	ns.Run("iptables-legacy", "-A", "OUTPUT", "-s", "10.0.0.2", "-j", "ACCEPT")
	for i := 0; i < 2; i++ {
		if r := resweepOnce(t, a, rec); r.Queued != 1 {
			t.Fatalf("re-sweep %d after the new rule: %+v, want the pod queued (its last finding was dropped)", i+1, r)
		}
		if _, scans := scannedIDs(t, a, rec, 1); scans[0].Stored != findings.Limited {
			t.Fatalf("re-sweep %d's scan: %s, want limited", i+1, scans[0].Label())
		}
	}
}
