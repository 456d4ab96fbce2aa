package ipset

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/iptables-alerter/iptables-alerter/internal/child"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// TestMain lets Names re-execute this test binary as its probe.
func TestMain(m *testing.M) {
	child.Main(Probe)
	os.Exit(m.Run())
}

// TestNames reads names by index from sets the real ipset made, with a
// hole (a destroyed set) that the next set fills, in the child process and
// in-process; the netns must be unchanged.
func TestNames(t *testing.T) {
	nstest.NeedRoot(t, "ipset", "bash")
	for _, inChild := range []bool{true, false} {
		name := "in-process"
		if inChild {
			name = "child process"
		}
		t.Run(name, func(t *testing.T) {
			defer child.SetWired(inChild)()
			ns := nstest.New(t)
			ns.Run("bash", "-c", `ipset create a hash:ip && ipset create b hash:net && ipset destroy a && ipset create "c d" hash:ip,port`)
			before := ns.Run("ipset", "list", "-n")
			h, err := netns.Open(ns.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			got, err := Names(h, []uint16{0, 1, 2, 60000}, time.Now().Add(5*time.Second))
			if err != nil {
				t.Fatalf("Names: %v", err)
			}
			if d := cmp.Diff(map[uint16]string{0: "c d", 1: "b"}, got); d != "" {
				t.Errorf("names by index (-want +got):\n%s", d)
			}
			if after := ns.Run("ipset", "list", "-n"); after != before {
				t.Errorf("sets changed: %q, then %q", before, after)
			}
		})
	}
}

// TestNamesNone asks nothing for no index.
func TestNamesNone(t *testing.T) {
	got, err := Names(nil, nil, time.Now())
	if err != nil || len(got) != 0 {
		t.Errorf("Names(nil) = %v, %v", got, err)
	}
}
