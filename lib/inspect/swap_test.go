package inspect_test

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// A pod that swaps rules while they are dumped (one deleted, one added, in
// one commit) keeps every chain's count right, and the dump, which resumes
// at the position its last batch ended, passes over the rule the deletion
// moved into that position. A look that comes back complete must have
// seen a ruleset that was there: the swaps delete the chain's first rule
// and append one, so its handles are always consecutive, and a gap is a
// rule missed. Each look may instead say it is incomplete; either way none
// is cut by the deadline, as a look again is bounded.
func TestInspectRulesSwappedDuringTheDump(t *testing.T) {
	nstest.NeedRoot(t, "nft")
	ns := nstest.New(t)
	const rules = 3000
	var batch strings.Builder
	batch.WriteString("add table ip t\nadd chain ip t c\n")
	for range rules {
		batch.WriteString("add rule ip t c counter\n")
	}
	ns.Restore(batch.String(), "nft", "-f", "-")

	// nft -i runs each line it reads as a commit of its own.
	swapper := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-i")
	in, err := swapper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := swapper.Start(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		// The chain is handle 1, its rules 2 to rules+1.
		i := 0
		for ; ; i++ {
			select {
			case <-stop:
				in.Close()
				swapped <- i
				return
			default:
			}
			if _, err := fmt.Fprintf(in, "delete rule ip t c handle %d; add rule ip t c counter\n", 2+i); err != nil {
				swapped <- i
				return
			}
		}
	}()
	defer func() {
		close(stop)
		t.Logf("%d swaps", <-swapped)
		if err := swapper.Wait(); err != nil {
			t.Errorf("nft -i: %v", err)
		}
	}()

	all := func(inspect.Family, string, bool) bool { return true }
	complete, incomplete := 0, 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		s, err := lookErr(t, ns, inspect.Options{Detail: all, MaxDetail: 2 * rules})
		if err != nil {
			if !errors.Is(err, inspect.ErrIncomplete) || errors.Is(err, inspect.ErrDeadline) || !s.Truncated {
				t.Fatalf("err=%v truncated=%v, want ErrIncomplete and truncated, or a complete look", err, s.Truncated)
			}
			incomplete++
			continue
		}
		complete++
		var handles []uint64
		for _, r := range s.Rules {
			if r.Table == "t" && r.Chain == "c" {
				handles = append(handles, r.Handle)
			}
		}
		slices.Sort(handles)
		if len(handles) != rules {
			t.Fatalf("complete look kept %d rules of chain c, want %d", len(handles), rules)
		}
		for i := 1; i < len(handles); i++ {
			if handles[i] != handles[i-1]+1 {
				t.Fatalf("complete look missed rule handle %d of chain c (seen %d, then %d)", handles[i-1]+1, handles[i-1], handles[i])
			}
		}
	}
	t.Logf("%d complete looks, %d incomplete", complete, incomplete)
}
