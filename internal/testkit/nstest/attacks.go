package nstest

import (
	"fmt"
	"strings"
)

// EmptyChains adds n empty native chains in a table "ip aaa", listed before
// any iptables table: a pod's way to make its chain list too long to read
// within a hook's deadline.
func (ns *NS) EmptyChains(n int) {
	ns.t.Helper()
	var b strings.Builder
	b.WriteString("add table ip aaa\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "add chain ip aaa c%d\n", i)
	}
	ns.Restore(b.String(), "nft", "-f", "-")
}

// UndumpableRule appends to filter INPUT an iptables-nft rule of 120
// comments of 243 bytes, about 35 KiB (within the 128 expressions a rule may
// hold): over the kernel's 32 KiB dump message, so every dump of the netns,
// nft's and iptables-nft-save's too, ends at it.
func (ns *NS) UndumpableRule() {
	ns.t.Helper()
	args := []string{"iptables-nft", "-A", "INPUT"}
	for i := 0; i < 120; i++ {
		args = append(args, "-m", "comment", "--comment", fmt.Sprintf("%s%03d", strings.Repeat("x", 240), i))
	}
	if out, err := ns.Exec(append(args, "-j", "ACCEPT")...); err != nil {
		ns.t.Fatalf("iptables-nft -A INPUT with 120 comments: %v: %.200s", err, out)
	}
}

// ManyRules appends n iptables-nft rules to filter INPUT: a pod's way to
// make every scan of it run to its deadline (about 15,000 rules a second).
func (ns *NS) ManyRules(n int) {
	ns.t.Helper()
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -p tcp --dport %d -j ACCEPT\n", i>>16&255, i>>8&255, i&255, 1024+i%50000)
	}
	b.WriteString("COMMIT\n")
	ns.Restore(b.String(), "iptables-nft-restore", "--noflush")
}

// NativeRules adds n native nft rules in table "inet junk", in chains of
// 1,000 (a chain's dump is quadratic in its length): no usage, but every
// look reads them, so a pod chooses what each look of it costs.
func (ns *NS) NativeRules(n int) {
	ns.t.Helper()
	var b strings.Builder
	b.WriteString("add table inet junk\n")
	for i := 0; i < n; i++ {
		if i%1000 == 0 {
			fmt.Fprintf(&b, "add chain inet junk c%d\n", i/1000)
		}
		fmt.Fprintf(&b, "add rule inet junk c%d ip saddr 10.%d.%d.%d counter drop\n", i/1000, i>>16&255, i>>8&255, i&255)
	}
	ns.Restore(b.String(), "nft", "-f", "-")
}
