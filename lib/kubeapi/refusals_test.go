package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestOutlasted: a webhook that cannot be called holds the writes of one
// kind in one namespace for Hold, counted from its first failure there,
// and from then on is that namespace's refusal until a write gets
// through; a pause in the failures longer than Hold before that is a new
// outage. Other errors and namespaces have clocks of their own or none;
// the other kind's clock in the same namespace is outlasted with it. A
// full table of clocks holds no namespace past the hold.
func TestOutlasted(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	r := NewRefusals()
	r.now = func() time.Time { return now }
	r.Hold = time.Minute
	err := fmt.Errorf("create event: %w", failedCall)
	step := func(d time.Duration) { now = now.Add(d) }
	check := func(what string, got, want bool) {
		t.Helper()
		if got != want {
			t.Errorf("%s: Outlasted = %v, want %v", what, got, want)
		}
	}
	check("first failure", r.Outlasted(KindEvent, "shop", err), false)
	step(30 * time.Second)
	check("within the hold", r.Outlasted(KindEvent, "shop", err), false)
	step(29 * time.Second)
	check("still within", r.Outlasted(KindEvent, "shop", err), false)
	check("another namespace's first", r.Outlasted(KindEvent, "bank", err), false)
	check("the Reports' first", r.Outlasted(KindReport, "shop", err), false)
	step(time.Second)
	check("a hold later", r.Outlasted(KindEvent, "shop", err), true)
	check("the next write there", r.Outlasted(KindEvent, "shop", err), true)
	check("another namespace, a second in", r.Outlasted(KindEvent, "bank", err), false)
	check("the Reports there, once the Events outlasted", r.Outlasted(KindReport, "shop", err), true)
	check("a 503 is no webhook's", r.Outlasted(KindEvent, "shop", apierrors.NewServiceUnavailable("later")), false)
	check("a 500 of something else", r.Outlasted(KindEvent, "shop", apierrors.NewInternalError(errors.New("etcd"))), false)
	step(2 * time.Hour)
	check("outlasted, after a pause", r.Outlasted(KindEvent, "shop", err), true)
	r.Clear(KindEvent, "shop")
	r.Clear(KindReport, "shop")
	check("after writes got through", r.Outlasted(KindEvent, "shop", err), false)
	step(30 * time.Second)
	check("the new clock, within", r.Outlasted(KindEvent, "shop", err), false)
	step(30 * time.Second)
	check("the new clock, a hold later", r.Outlasted(KindEvent, "shop", err), true)

	// Failures that pause for longer than the hold before it ran out:
	// the next is a new outage's first.
	check("gap: first", r.Outlasted(KindEvent, "gap", err), false)
	step(2 * time.Minute)
	check("gap: after a pause", r.Outlasted(KindEvent, "gap", err), false)
	step(time.Minute)
	check("gap: a hold after the pause", r.Outlasted(KindEvent, "gap", err), true)

	// Another webhook on the other kind has its own hold.
	other := apierrors.NewInternalError(errors.New(`failed calling webhook "other.example.com": context deadline exceeded`))
	r.Outlasted(KindReport, "two", err)
	step(time.Minute)
	check("two: the Reports' webhook outlasted", r.Outlasted(KindReport, "two", err), true)
	check("two: another webhook's first on the Events", r.Outlasted(KindEvent, "two", other), false)

	// A write that timed out names no webhook: it ties to no other
	// kind's clock, timed out or named.
	held := fmt.Errorf("write report: %w", &heldUpError{err: context.DeadlineExceeded})
	r.Outlasted(KindEvent, "slow", held)
	step(time.Minute)
	check("slow: the Events' timeouts outlasted", r.Outlasted(KindEvent, "slow", held), true)
	check("slow: the Reports' first timeout", r.Outlasted(KindReport, "slow", held), false)
	check("slow: the Reports' first named failure", r.Outlasted(KindReport, "slow", err), false)
	// A clock keeps the first webhook it was told of: once both kinds'
	// clocks name the same, one outlasted outlasts the other, whatever
	// the next failure.
	check("slow: the Events' named failure, outlasted", r.Outlasted(KindEvent, "slow", err), true)
	check("slow: a timeout of the Reports, both clocks named alike", r.Outlasted(KindReport, "slow", held), true)

	r.Hold = 0
	check("Hold 0 waits for ever", r.Outlasted(KindEvent, "shop", err), false)
	var none *Refusals
	check("nil Refusals", none.Outlasted(KindEvent, "shop", err), false)
	none.Clear(KindEvent, "shop")

	// A full table forgets the clock seen longest ago: a namespace past
	// it waits no longer than the hold, and the one forgotten starts
	// again.
	full := NewRefusals()
	full.now, full.Hold = func() time.Time { return now }, time.Minute
	for i := range maxRefusals {
		full.Outlasted(KindEvent, fmt.Sprint("ns-", i), err)
		step(time.Millisecond)
	}
	check("a namespace past the table, first", full.Outlasted(KindEvent, "late", err), false)
	step(time.Minute)
	check("a namespace past the table, a hold later", full.Outlasted(KindEvent, "late", err), true)
	check("the clock seen longest ago, forgotten", full.Outlasted(KindEvent, "ns-0", err), false)
	// A held line is tried at least every --max-backoff: a flood of
	// new namespaces in between forgets theirs, not its clock.
	check("held: first", full.Outlasted(KindEvent, "held", err), false)
	for i := range 3 {
		for j := range maxRefusals / 2 {
			full.Outlasted(KindReport, fmt.Sprint("flood-", i, "-", j), err)
		}
		step(15 * time.Second)
		check("held: tried within the hold, amid a flood", full.Outlasted(KindEvent, "held", err), false)
	}
	step(15 * time.Second)
	check("held: a hold later, amid a flood", full.Outlasted(KindEvent, "held", err), true)
	if len(full.failing) > maxRefusals {
		t.Errorf("a flood of namespaces left %d clocks, want at most %d", len(full.failing), maxRefusals)
	}
}

// TestRefusalsForgotten: a refusal not seen again for forgetAfter (its
// namespace deleted, say: nothing clears it) leaves /healthz, is said
// again when it comes back, and frees its place in a full table; a
// webhook's clock unseen as long starts again.
func TestRefusalsForgotten(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	r := NewRefusals()
	r.now = func() time.Time { return now }
	if !r.note(KindEvent, "gone", RefusedQuota) || r.note(KindEvent, "gone", RefusedQuota) {
		t.Fatal("a refusal is not said once")
	}
	if got := r.Degraded(); got != "event refused in namespace gone (quota)" {
		t.Errorf("Degraded = %q", got)
	}
	now = now.Add(forgetAfter - time.Minute)
	if r.note(KindEvent, "gone", RefusedQuota) {
		t.Error("a refusal seen again within forgetAfter is said again")
	}
	now = now.Add(forgetAfter)
	if got := r.Degraded(); got != "" {
		t.Errorf("Degraded = %q a day after the last refusal, want empty", got)
	}
	if !r.note(KindEvent, "gone", RefusedQuota) {
		t.Error("a refusal forgotten is not said again")
	}
	// A full table makes room by forgetting the stale.
	for i := range maxRefusals - 1 {
		r.note(KindReport, fmt.Sprint("ns-", i), RefusedQuota)
	}
	if r.note(KindReport, "late", RefusedQuota) {
		t.Error("a full table took one more")
	}
	now = now.Add(forgetAfter)
	if !r.note(KindReport, "late", RefusedQuota) {
		t.Error("a full table of stale refusals made no room")
	}

	err := fmt.Errorf("create event: %w", failedCall)
	r.Hold = time.Minute
	r.Outlasted(KindEvent, "shop", err)
	now = now.Add(time.Minute)
	if !r.Outlasted(KindEvent, "shop", err) {
		t.Fatal("not outlasted after the hold")
	}
	now = now.Add(forgetAfter)
	if r.Outlasted(KindEvent, "shop", err) {
		t.Error("a clock unseen for forgetAfter did not start again")
	}
}
