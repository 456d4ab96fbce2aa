package scan

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
)

// earlyLoaders count their calls and tell, from the stack, whether the
// allowlist was loaded on a goroutine tables.early started.
type earlyLoaders struct {
	allows, vendors, warms atomic.Int32
	early, warmEarly       atomic.Bool
	list                   *allowlist.List
	panicWith              any
	// goexit ends the allowlist's loader with runtime.Goexit.
	goexit bool
	// warm, if set, runs inside Warm.
	warm func()
}

// onEarly tells whether the caller runs on a goroutine tables.early started.
func onEarly() bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "created by github.com/iptables-alerter/iptables-alerter/lib/scan.(*tables).early")
}

func (l *earlyLoaders) loaders() Loaders {
	return Loaders{
		Allow: func() (*allowlist.List, error) {
			l.allows.Add(1)
			l.early.Store(onEarly())
			if l.panicWith != nil {
				panic(l.panicWith)
			}
			if l.goexit {
				runtime.Goexit()
			}
			return l.list, nil
		},
		Vendors: func() (*catalog.Table, error) {
			l.vendors.Add(1)
			return catalog.Builtin(), nil
		},
		Warm: func() {
			// Stored before the count the test polls for.
			l.warmEarly.Store(onEarly())
			l.warms.Add(1)
			if l.warm != nil {
				l.warm()
			}
		},
	}
}

// allowedRule is a netns holding one rule and an allowlist entry for it.
func allowedRule(t *testing.T) (*allowlist.List, *nstest.NS) {
	t.Helper()
	list, err := allowlist.New([]allowlist.Entry{{Name: "drop-one", Rule: "-A INPUT -s 10.9.9.9 -j DROP"}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "INPUT", "-s", "10.9.9.9", "-j", "DROP")
	return list, ns
}

func runEarly(t *testing.T, ns *nstest.NS, l *earlyLoaders, legacyInProcess bool) Result {
	t.Helper()
	if runtime.GOMAXPROCS(0) < 2 {
		// With one processor RunFrom loads the tables after the look.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	h := ns.Open()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return RunFrom(ctx, h, "default", l.loaders(), legacyInProcess)
}

// TestRunFromLoadsTablesEarly: a one-shot look that lists an iptables
// client's table loads the allowlist and the vendor table on a goroutine
// of their own while it reads the rules, once each, and applies them as
// before, and warms the record step there too (Loaders.Warm); the agent's
// look (legacyInProcess) loads them after the look and warms nothing, and
// a clean netns loads nothing.
func TestRunFromLoadsTablesEarly(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	list, ns := allowedRule(t)
	ns.Run("iptables-nft", "-A", "INPUT", "-s", "10.9.9.8", "-j", "DROP")
	clean := nstest.New(t)
	for _, tc := range []struct {
		name            string
		ns              *nstest.NS
		legacyInProcess bool
		calls           int32
		early           bool
	}{
		{"hook", ns, false, 1, true},
		{"agent", ns, true, 1, false},
		{"clean", clean, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &earlyLoaders{list: list}
			res := runEarly(t, tc.ns, l, tc.legacyInProcess)
			if !res.Complete() {
				t.Fatalf("look incomplete: %v", res.Err)
			}
			if a, v := l.allows.Load(), l.vendors.Load(); a != tc.calls || v != tc.calls {
				t.Errorf("allowlist loaded %d times, vendor table %d, want %d each", a, v, tc.calls)
			}
			if l.early.Load() != tc.early {
				t.Errorf("allowlist loaded beside the look: %v, want %v", l.early.Load(), tc.early)
			}
			// The look does not wait for Warm: wait for it here.
			var warms int32
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
				if warms = l.warms.Load(); warms != 0 || !tc.early {
					break
				}
			}
			if want := map[bool]int32{true: 1}[tc.early]; warms != want || l.warmEarly.Load() != tc.early {
				t.Errorf("Warm ran %d times (beside the look: %v), want %d", warms, l.warmEarly.Load(), want)
			}
			if tc.calls == 0 {
				return
			}
			if res.Allowed.Count != 1 || len(res.Usage.Rules) != 1 || res.Vendors == nil || res.AllowErr != nil {
				t.Errorf("allowlisted %d, rules left %d, vendor table %v, allowlist error %v: want 1, 1, the built-in one, none",
					res.Allowed.Count, len(res.Usage.Rules), res.Vendors != nil, res.AllowErr)
			}
		})
	}
}

// TestRunFromEarlyLoadPanics: a loader that panics on the early goroutine
// panics in RunFrom's caller, where the hook's recover logs it, instead of
// ending the process (for the hook, a container killed).
func TestRunFromEarlyLoadPanics(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "INPUT", "-s", "10.9.9.9", "-j", "DROP")
	l := &earlyLoaders{panicWith: "broken loader"}
	defer func() {
		r := recover()
		p, ok := r.(*LoaderPanic)
		if !ok || p.Value != "broken loader" {
			t.Fatalf("recovered %v, want the loader's panic", r)
		}
		// Where it happened, not where wait raised it again.
		if !strings.Contains(string(p.Stack), "early_test.go") || !strings.Contains(p.Error(), "broken loader") {
			t.Errorf("the panic's stack does not show the loader:\n%s", p.Stack)
		}
		if !l.early.Load() {
			t.Error("the loader did not run beside the look")
		}
	}()
	runEarly(t, ns, l, false)
	t.Error("RunFrom returned")
}

// TestRunFromEarlyLoaderGoexits: a loader that ends its goroutine without
// returning (runtime.Goexit) leaves the look with an allowlist error, not
// an allowlist quietly missing: every rule stays in the usage, and the
// finding says the allowlist could not be applied.
func TestRunFromEarlyLoaderGoexits(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	list, ns := allowedRule(t)
	l := &earlyLoaders{list: list, goexit: true}
	res := runEarly(t, ns, l, false)
	if !l.early.Load() {
		t.Fatal("the loader did not run beside the look")
	}
	if !errors.Is(res.AllowErr, errLoaderEnded) || !errors.Is(res.VendorErr, errLoaderEnded) {
		t.Errorf("allowlist error %v, vendor table error %v, want %v for both", res.AllowErr, res.VendorErr, errLoaderEnded)
	}
	if res.Allowed.Count != 0 || len(res.Usage.Rules) != 1 {
		t.Errorf("allowlisted %d, rules left %d: want 0 and 1", res.Allowed.Count, len(res.Usage.Rules))
	}
}

// TestRunFromDoesNotWaitForWarm: the look returns while Warm is still
// running, and a Warm that panics is dropped instead of ending the process
// (the record step, doing the same work, would raise it where it is
// logged).
func TestRunFromDoesNotWaitForWarm(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "INPUT", "-s", "10.9.9.9", "-j", "DROP")
	release, ended := make(chan struct{}), make(chan struct{})
	l := &earlyLoaders{warm: func() {
		defer close(ended)
		<-release
		panic("broken warm-up")
	}}
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	// Opened here: a failing Open ends the test, which only its own
	// goroutine may do.
	h := ns.Open()
	looked := make(chan Result, 1)
	go func() { looked <- RunFrom(context.Background(), h, "default", l.loaders(), false) }()
	select {
	case res := <-looked:
		if len(res.Usage.Rules) != 1 {
			t.Errorf("rules seen %d, want 1", len(res.Usage.Rules))
		}
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the look waited for Warm")
	}
	close(release)
	<-ended
	// Had the panic not been recovered, the test binary would end here.
	time.Sleep(100 * time.Millisecond)
}
