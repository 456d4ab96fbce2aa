package inspect_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

func chainOf(s inspect.Snapshot, fam inspect.Family, table, name string) *inspect.Chain {
	for i, c := range s.Chains {
		if c.Family == fam && c.Table == table && c.Name == name {
			return &s.Chains[i]
		}
	}
	return nil
}

// A first rule bigger than the kernel's first dump batch (about 3.7 KiB on a
// fresh socket) used to end the rule dump there: every later rule unseen.
func TestInspectBigFirstRuleHidesNothing(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns := nstest.New(t)
	var big strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&big, "tcp dport != %d ", i)
	}
	ns.Run("nft", "add table inet aaa; add chain inet aaa c; add rule inet aaa c "+big.String()+"accept")
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	s := look(t, ns, inspect.Options{})
	if c := chainOf(s, inspect.IP, "filter", "OUTPUT"); c == nil || c.Rules != 1 {
		t.Fatalf("ip filter OUTPUT = %+v, want 1 rule seen after the big rule", c)
	}
	if s.Truncated {
		t.Fatal("complete dump marked truncated")
	}
}

// A netdev chain naming 250 devices is one big chain message: the chain
// listing used to end there.
func TestInspectBigChainHidesNothing(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns := nstest.New(t)
	var batch strings.Builder
	var devs []string
	for i := 0; i < 250; i++ {
		d := fmt.Sprintf("bridge-long-%03d", i)
		fmt.Fprintf(&batch, "link add %s type bridge\n", d)
		devs = append(devs, d)
	}
	ns.Restore(batch.String(), "ip", "-batch", "-")
	ns.Run("nft", "add table netdev aaa; add chain netdev aaa c { type filter hook ingress devices = { "+strings.Join(devs, ", ")+" } priority 0; }")
	ns.Run("iptables-nft", "-N", "MINE")
	s := look(t, ns, inspect.Options{})
	if c := chainOf(s, inspect.IP, "filter", "MINE"); c == nil {
		t.Fatal("ip filter MINE unseen after the big netdev chain")
	}
}

// A rule over 32 KiB cannot be dumped at all (the kernel's largest batch):
// the dump ends there for every reader, nft and iptables-nft-save too. The
// inspection must say so instead of reporting the rest as clean.
func TestInspectUndumpableRuleIsTruncated(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.UndumpableRule()
	ns.Run("iptables-nft", "-A", "INPUT", "-j", "DROP")
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	s, err := lookErr(t, ns, inspect.Options{})
	if !errors.Is(err, inspect.ErrIncomplete) || !s.Truncated {
		t.Fatalf("err=%v truncated=%v, want ErrIncomplete and truncated", err, s.Truncated)
	}
}

// Jumps count in a chain's use: rules and verdict maps that jump must not
// make a complete dump look incomplete.
func TestInspectJumpsAreNotMissingRules(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns := nstest.New(t)
	ns.Run("nft", `add table ip t; add chain ip t a; add chain ip t b; add chain ip t c
add rule ip t a jump b; add rule ip t a goto c; add rule ip t b accept
add rule ip t a tcp dport vmap { 80 : jump b, 81 : goto c, 82 : jump c }
add map ip t m { type inet_service : verdict; elements = { 90 : jump b } }
add rule ip t a tcp dport vmap @m
add rule ip t a tcp dport 22 jump { counter; accept; }`)
	ns.Run("iptables-nft", "-N", "X")
	ns.Run("iptables-nft", "-A", "INPUT", "-j", "X")
	ns.Run("iptables-nft", "-A", "X", "-j", "RETURN")
	ns.Run("iptables-nft", "-N", "Y")
	ns.Run("iptables-nft", "-A", "Y", "-j", "X")
	// With the hook's options: rules of iptables tables are read first,
	// before any chain listing.
	s := look(t, ns, inspect.Options{Detail: classify.Candidate, First: classify.IPTablesTable})
	if s.Truncated {
		t.Fatal("complete dump with jumps marked truncated")
	}
	if c := chainOf(s, inspect.IP, "filter", "X"); c == nil || c.Rules != 1 {
		t.Fatalf("ip filter X = %+v, want 1 rule", c)
	}
}

// The verdict maps whose jumps a table's use check counts are held by
// name, up to MaxChains of them: a pod's 200,000 maps of long names held
// tens of MB. Past the bound the check cannot conclude, and the look is
// incomplete.
func TestInspectTooManyVerdictMapsIsTruncated(t *testing.T) {
	nstest.NeedRoot(t, "nft")
	ns := nstest.New(t)
	var batch strings.Builder
	batch.WriteString("add table ip t; add chain ip t a; add chain ip t b\n")
	for i := range 5 {
		fmt.Fprintf(&batch, "add map ip t m%d { type inet_service : verdict; elements = { 90 : jump b } }\n", i)
	}
	ns.Restore(batch.String(), "nft", "-f", "-")
	s, err := lookErr(t, ns, inspect.Options{MaxChains: 4})
	if !errors.Is(err, inspect.ErrIncomplete) || !s.Truncated {
		t.Fatalf("5 verdict maps, MaxChains 4: err=%v truncated=%v, want ErrIncomplete and truncated", err, s.Truncated)
	}
	// Within the bound the jumps account for chain b's use.
	if s := look(t, ns, inspect.Options{MaxChains: 5}); s.Truncated {
		t.Fatal("5 verdict maps, MaxChains 5: complete dump marked truncated")
	}
}
