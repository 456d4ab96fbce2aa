package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestFairness (issue 18 item 1): two pods whose containers crash-loop, a
// StopContainer and a PostStartContainer of each before every scan, do not
// starve the others. Scans are let through one at a time (the hold seam)
// by one worker: with more, each takes a job and waits for a token, and
// the token goes to whichever waits first, not to the oldest job. So the
// order is the queue's alone: the 20 pods of the registration sweep
// are all scanned before either crash-looping pod is scanned a third time
// (its first scan, and at most one more queued behind the sweep), and an
// ordinary pod's event is scanned before either crash-looping pod is
// scanned twice after it. Real network namespaces, opened by the handlers.
func TestFairness(t *testing.T) {
	nstest.NeedRoot(t)
	dir := t.TempDir()
	rec := newRecorder()
	a := startAgentWith(t, dir, rec, func(c *Config) { c.Workers = 1 })
	ctx := context.Background()
	other := nstest.New(t)
	slow := []*api.PodSandbox{pod("slow-a", nstest.New(t).Path()), pod("slow-b", nstest.New(t).Path())}
	restarts := 0
	crash := func() {
		restarts++
		for _, p := range slow {
			c := &api.Container{Id: fmt.Sprintf("%s-c%d", p.Id, restarts), Name: "app"}
			if _, err := a.StopContainer(ctx, p, c); err != nil {
				t.Fatal(err)
			}
			if err := a.PostStartContainer(ctx, p, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	// next lets one scan through, after one more restart of each slow pod.
	next := func() Scan {
		crash()
		release(a, 1)
		return rec.wait(t, 1)[0]
	}

	crash()
	var pods []*api.PodSandbox
	for i := range 20 {
		pods = append(pods, pod(fmt.Sprintf("swept-%02d", i), other.Path()))
	}
	if _, err := a.Synchronize(ctx, pods, nil); err != nil {
		t.Fatal(err)
	}
	swept := map[string]bool{}
	slowScans := map[string]int{}
	for n := 0; len(swept) < len(pods); n++ {
		if n == 3*len(pods) {
			t.Fatalf("%d scans after Synchronize: %d of %d pods swept, the crash-looping ones scanned %v times", n, len(swept), len(pods), slowScans)
		}
		s := next()
		if s.Meta.Source == SourceSweep {
			if swept[s.Meta.SandboxID] {
				t.Fatalf("pod %s swept twice", s.Meta.SandboxID)
			}
			swept[s.Meta.SandboxID] = true
			continue
		}
		if slowScans[s.Meta.SandboxID]++; slowScans[s.Meta.SandboxID] > 2 {
			t.Fatalf("crash-looping %s scanned a third time with %d of %d pods swept", s.Meta.SandboxID, len(swept), len(pods))
		}
	}

	// An ordinary pod's event, among the crash-looping pods' ones.
	if err := a.PostStartContainer(ctx, pod("ordinary", other.Path()), &api.Container{Id: "o1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	before := map[string]int{}
	for {
		s := next()
		if s.Meta.SandboxID == "ordinary" {
			break
		}
		if before[s.Meta.SandboxID]++; before[s.Meta.SandboxID] > 1 {
			t.Fatalf("crash-looping %s scanned twice before the ordinary pod's event (scans since: %v)", s.Meta.SandboxID, before)
		}
	}
}

// TestFairnessHeavy: two crash-looping pods whose every scan runs to the
// deadline (a 50,000-rule netns, a 100 ms deadline) hold one of the two
// workers at most, so an ordinary pod's event is scanned among the next
// two scans instead of waiting for a heavy one to end. Scans are let
// through by the hold seam, so which jobs the workers took is the queue's
// choice alone, whatever the load: a heavier load only makes the big scans
// run out more surely.
func TestFairnessHeavy(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	big := nstest.New(t)
	big.ManyRules(50000)
	other := nstest.New(t)
	rec := newRecorder()
	a := startAgent(t, t.TempDir(), rec, 100*time.Millisecond)
	ctx := context.Background()
	slow := []*api.PodSandbox{pod("slow-a", big.Path()), pod("slow-b", big.Path())}
	restarts := 0
	crash := func() {
		restarts++
		for _, p := range slow {
			if err := a.PostStartContainer(ctx, p, &api.Container{Id: fmt.Sprintf("%s-c%d", p.Id, restarts), Name: "app"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Both workers take a slow pod's scan; their next ones wait.
	crash()
	crash()
	release(a, 2)
	for _, s := range rec.wait(t, 2) {
		if !s.RanOut {
			t.Fatalf("the 50,000-rule scan of %s ended in %s, before its 100 ms deadline", s.Meta.SandboxID, s.Duration)
		}
	}
	// Both are heavy once their turns end (just after Scanned): one worker
	// has taken one of their next jobs, the other waits for a job that is
	// not heavy. Without the limit both would have taken theirs by then.
	waitCount(t, &a.queue.mu, func() int { return len(a.queue.heavy) }, 2, "crash-looping pods heavy")
	crash()
	if err := a.PostStartContainer(ctx, pod("ordinary", other.Path()), &api.Container{Id: "o1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	release(a, 2)
	got := rec.wait(t, 2)
	if got[0].Meta.SandboxID != "ordinary" && got[1].Meta.SandboxID != "ordinary" {
		t.Fatalf("next two scans %s and %s: the ordinary pod's event waited behind both crash-looping pods",
			got[0].Meta.SandboxID, got[1].Meta.SandboxID)
	}
}
