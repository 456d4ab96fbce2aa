package classify

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// maxTables bounds the table lists of a summary: a hostile pod may create
// thousands of tables holding xt rules.
const maxTables = 32

// maxName bounds attacker-chosen table names in a summary.
const maxName = 64

// Summary is what a finding says about usage: counts, the tables holding
// it and a fingerprint of the rules.
type Summary struct {
	// NftTables lists the tables holding usage, as "family name", sorted,
	// at most maxTables, names capped.
	NftTables []string
	// NftPerTable counts chains and rules per table of NftTables, in the
	// same order (findings.Nft.PerTable).
	NftPerTable  []findings.TableCount
	NftChains    int
	NftRules     int
	LegacyTables []string
	LegacyRules  int
	// Impact counts the rules per RHEL 10 impact level; Worst is the worst
	// level of the usage: native for nftables usage without rules (a user
	// chain, a drop policy), "" for none.
	Impact findings.Impact
	Worst  string
	// Fingerprint is a hash of the usage: the same rules give the same
	// value whatever their counters, handles or the time.
	Fingerprint string
	// NftFingerprint and LegacyFingerprint hash each part of the usage
	// alone (Fingerprint hashes both), so that a look that read only one
	// part whole can be compared with an earlier look on that part.
	NftFingerprint, LegacyFingerprint string
	// ListsCut is set when the table lists had to be cut: the counts
	// are whole (findings.Record.ListsCut).
	ListsCut bool
	// MixedBackends is set when both backends hold usage: iptables-nft
	// rules in nftables and entries beyond the untouched ones in a legacy
	// x_tables table. An empty legacy table (any iptables-legacy -L
	// makes one) is not usage, so it never makes a netns mixed.
	MixedBackends bool
}

// Summarize counts usage and fingerprints it.
func Summarize(u Usage) Summary {
	s := Summary{NftTables: []string{}, LegacyTables: []string{}, NftPerTable: []findings.TableCount{}}
	seen := map[string]bool{}
	per := map[string]*findings.TableCount{}
	h, hn, hl := sha256.New(), sha256.New(), sha256.New()
	for _, c := range u.Chains {
		if !c.Used() {
			continue
		}
		s.NftChains++
		s.NftRules += c.Rules
		s.Impact.Xt += c.XT
		s.Impact.Native += c.Rules - c.XT
		// Deduplicate on the full name; cap only what is shown.
		if t := string(c.Family) + " " + c.Table; !seen[t] {
			seen[t] = true
			name := string(c.Family) + " " + safetext.Cut(c.Table, maxName)
			s.NftTables = append(s.NftTables, name)
			// A shaped table's chains are all listed by the save
			// tool; another table holding xt rules is refused by it,
			// and its chains are those holding usage.
			chains, shaped := u.Tables[t]
			per[t] = &findings.TableCount{Table: name, Chains: chains}
			if !shaped {
				per[t].Chains = 0
			}
		}
		pt := per[string(c.Family)+" "+c.Table]
		pt.Rules += c.Rules
		if _, shaped := u.Tables[string(c.Family)+" "+c.Table]; !shaped {
			pt.Chains++
		}
		// Length-prefixed fields: hostile names cannot collide by shifting
		// bytes from one field into the next.
		line := fmt.Sprintf("nft %d:%s %d:%s %d:%s %t %t %d %x\n", len(c.Family), c.Family, len(c.Table), c.Table, len(c.Name), c.Name, c.User, c.Drop, c.Rules, c.Sum)
		h.Write([]byte(line))
		hn.Write([]byte(line))
	}
	for _, l := range u.Legacy {
		s.LegacyRules += l.Rules
		s.LegacyTables = append(s.LegacyTables, string(l.Family)+" "+l.Table)
		// The table's content, counters zeroed: an edit in place keeps
		// the count and must still give a new fingerprint.
		line := fmt.Sprintf("legacy %s %s %d %x\n", l.Family, l.Table, l.Rules, l.Sum)
		h.Write([]byte(line))
		hl.Write([]byte(line))
	}
	s.Impact.Legacy = s.LegacyRules
	s.MixedBackends = s.NftRules > 0 && s.LegacyRules > 0
	s.Worst = s.Impact.Worst()
	switch {
	case len(u.Legacy) > 0:
		// A legacy table is usage at the legacy level even when it
		// holds no rule, only a drop policy: RHEL 10 has no such table.
		s.Worst = findings.ImpactLegacy
	case s.Worst == "" && s.NftChains > 0:
		s.Worst = findings.ImpactNative
	}
	sort.Strings(s.NftTables)
	sort.Strings(s.LegacyTables)
	if len(s.NftTables) > maxTables {
		s.NftTables, s.ListsCut = s.NftTables[:maxTables], true
	}
	for _, pt := range per {
		s.NftPerTable = append(s.NftPerTable, *pt)
	}
	sort.Slice(s.NftPerTable, func(i, j int) bool { return s.NftPerTable[i].Table < s.NftPerTable[j].Table })
	s.NftPerTable = s.NftPerTable[:min(len(s.NftPerTable), maxTables)]
	s.Fingerprint = hex.EncodeToString(h.Sum(nil)[:16])
	s.NftFingerprint = hex.EncodeToString(hn.Sum(nil)[:16])
	s.LegacyFingerprint = hex.EncodeToString(hl.Sum(nil)[:16])
	return s
}
