package inspect

import (
	"fmt"
	"math/bits"
	"time"
)

// Family is an nftables address family in nft's own spelling.
type Family string

const (
	IP     Family = "ip"
	IP6    Family = "ip6"
	INet   Family = "inet"
	ARP    Family = "arp"
	Bridge Family = "bridge"
	Netdev Family = "netdev"
)

// familyNumbers maps each family to its NFPROTO_* number, the first byte of
// every nftables netlink message.
var familyNumbers = map[Family]byte{IP: 2, IP6: 10, INet: 1, ARP: 3, Bridge: 7, Netdev: 5}

// Number is the family's NFPROTO_* value (0, NFPROTO_UNSPEC, if unknown).
func (f Family) Number() byte { return familyNumbers[f] }

// FamilyOf names an NFPROTO_* number; unknown numbers get "familyN".
func FamilyOf(n byte) Family {
	for f, v := range familyNumbers {
		if v == n {
			return f
		}
	}
	return Family(fmt.Sprintf("family%d", n))
}

// Snapshot is what one read-only look at a netns saw.
type Snapshot struct {
	Tables []Table
	Chains []Chain
	// Rules holds the rules kept in detail (expression data included): those
	// Options.Detail asked for, up to Options.MaxDetail. Every rule is
	// counted in its Chain whether kept or not.
	Rules  []Rule
	Legacy []LegacyTable
	// LegacyRules holds the legacy tables' rules in table and rule order,
	// as far as the bounds of the read let them be (LegacyTable.Cut says
	// where they did not).
	LegacyRules []LegacyRule
	// Truncated is set when the look did not see everything (deadline, a
	// size bound, a dump the kernel ended early, a failed or abandoned
	// legacy probe; Inspect's error says which): what is here is then a
	// lower bound, never a claim of "clean".
	Truncated bool
	// NftPartial and LegacyPartial say which part of the look did not see
	// everything: its nftables read, its legacy x_tables read (a busy
	// x_tables mutex cuts only the latter). Either sets Truncated; a part
	// not marked was read whole, and what it holds can be compared with
	// an earlier look's.
	NftPartial, LegacyPartial bool
	// State is the namespace's State as this look read it: the nftables
	// generation its read began with, and the legacy tables its legacy
	// look read. StateOK says it is known: the generation was read, and
	// the legacy look, if any x_tables module is loaded, ran in this
	// process (Options.LegacyInProcess) and read every table it listed
	// whole. A change after the look began changes it, as it changes a
	// ReadState made before the look: a daemon reads no State apart.
	State   State
	StateOK bool
	// NftTook is how long the nftables read took: what a look of the
	// namespace costs by its own rules, without the legacy look's wait for
	// a neighbour's x_tables mutex.
	NftTook time.Duration
}

// Table is an nftables table.
type Table struct {
	Family Family
	Name   string
}

// Chain is an nftables chain; Base chains carry their hook template.
type Chain struct {
	Family   Family
	Table    string
	Name     string
	Base     bool
	Type     string // "filter", "nat", "route"
	Hook     uint32 // NF_INET_* (or NF_ARP_*) hook number
	Priority int32
	// Policy is the base chain's verdict: 1 accept, 0 drop (NF_ACCEPT/NF_DROP).
	// For a user chain with PolicyRule, the verdict of that rule.
	Policy uint32
	// PolicyRule is set when the chain's last rule is the one ebtables-nft
	// writes for a user chain's policy (-N foo -P DROP): ebtables-nft-save
	// shows it as the chain's policy, so it is not counted in Rules.
	PolicyRule bool

	// Rules counts the chain's rules, XTRules those holding an xt match or
	// target, and Sum hashes the rules' Sums in order: together they stand
	// for every rule even when only a few were kept in Snapshot.Rules.
	Rules   int
	XTRules int
	Sum     uint64
	// NativeRules counts the chain's rules without an xt match or target
	// that Options.Native said no iptables client could have written;
	// Foreign is set when one of its rules makes the save tools refuse
	// the table. Both count within Rules.
	NativeRules int
	Foreign     bool
}

// Expr is one expression of a rule as the kernel sent it: its name
// ("payload", "match", ...) and its NFTA_EXPR_DATA attributes. Data is nil
// when the inspection kept only the name (rules beyond the detail bound).
type Expr struct {
	Name string
	Data []byte
}

// Rule is an nftables rule.
type Rule struct {
	Family Family
	Table  string
	Chain  string
	Handle uint64
	Exprs  []Expr
	// Native is set when Options.Native said no iptables client could
	// have written this rule and it holds no xt match or target.
	Native bool
	// Sum is a hash of the rule's meaning (expression names and data, with
	// counter values left out) so that usage can be fingerprinted even for
	// rules whose data was not kept.
	Sum uint64
}

// Kept gives the rules keep says to keep, in order, calling keep once per
// rule in order: rules itself when it keeps them all, as the classifying
// and the allowlist do for most scans, else a new slice (nil when none is
// kept). A 1,000-rule scan copied its rules twice before (about 190 KB).
func Kept(rules []Rule, keep func(Rule) bool) []Rule {
	for i, r := range rules {
		if keep(r) {
			continue
		}
		out := make([]Rule, i, len(rules)-1)
		copy(out, rules[:i])
		for _, r := range rules[i+1:] {
			if keep(r) {
				out = append(out, r)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	if len(rules) == 0 {
		return nil
	}
	return rules
}

// LegacyTable is a legacy x_tables table listed in the netns.
type LegacyTable struct {
	Family  Family // ip, ip6 or arp
	Name    string
	Entries uint32 // num_entries from *_SO_GET_INFO
	Hooks   uint32 // valid_hooks bitmask
	// Chains names the table's user-defined chains (tables with entries
	// beyond the untouched ones, at most maxLegacyChains, from
	// *_SO_GET_ENTRIES); they name vendors, nothing counts on them.
	Chains []string
	// Policies lists the built-in chains whose policy is not ACCEPT.
	Policies []LegacyChain
	// Cut is set when not every rule of the table is in
	// Snapshot.LegacyRules: the table is over the read cap, its entries
	// do not follow the layout, or the rule bound was reached. Its count
	// (Entries) is complete all the same.
	Cut bool
	// Sum hashes the table's entries as read (its first
	// MaxLegacyEntriesBytes) with every entry's counters zeroed: it stands
	// for the rules' content in fingerprints, as Chain.Sum does for
	// nftables, so an edit in place (iptables -R) changes it and traffic
	// never does. 0 for a table whose entries could not be read.
	Sum uint64
}

// Untouched is the entry count of a table nobody wrote to: one policy
// entry per hook it serves, plus the error entry that ends the table.
// Entries beyond it are rules and user chains.
func (t LegacyTable) Untouched() uint32 {
	return uint32(bits.OnesCount32(t.Hooks)) + 1
}
