package render

import (
	"context"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// dumpRules reads every rule of the netns through lib/inspect, the path the
// hook itself takes, keeping each expression exactly as the kernel sent it
// (name + raw NFTA_EXPR_DATA): the renderer is tested on the very bytes the
// hook will see.
func dumpRules(t testing.TB, nsPath string) []inspect.Rule {
	t.Helper()
	h, err := netns.Open(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	all := func(inspect.Family, string, bool) bool { return true }
	s, err := inspect.Inspect(ctx, h, inspect.Options{Detail: all, MaxDetail: 1 << 20})
	if err != nil {
		t.Fatalf("inspect %q: %v", nsPath, err)
	}
	return s.Rules
}
