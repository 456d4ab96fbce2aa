package findings

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/iptables-alerter/iptables-alerter/lib/classify"
)

// maxTables bounds the table lists of a record: a hostile pod may create
// thousands of tables holding xt rules.
const maxTables = 32

// maxName bounds attacker-chosen table names in a record.
const maxName = 64

// Summarize turns usage into the record's counts and fingerprint. truncated
// is set when the table lists had to be cut.
func Summarize(u classify.Usage) (nft Nft, legacy Legacy, fingerprint string, truncated bool) {
	nft.Tables, legacy.Tables = []string{}, []string{}
	seen := map[string]bool{}
	h := sha256.New()
	for _, c := range u.Chains {
		if !c.Used() {
			continue
		}
		nft.Chains++
		nft.Rules += c.Rules
		// Deduplicate on the full name; cap only what is shown.
		if t := string(c.Family) + " " + c.Table; !seen[t] {
			seen[t] = true
			nft.Tables = append(nft.Tables, string(c.Family)+" "+capName(c.Table))
		}
		// Length-prefixed fields: hostile names cannot collide by shifting
		// bytes from one field into the next.
		fmt.Fprintf(h, "nft %d:%s %d:%s %d:%s %t %t %d %x\n", len(c.Family), c.Family, len(c.Table), c.Table, len(c.Name), c.Name, c.User, c.Drop, c.Rules, c.Sum)
	}
	for _, l := range u.Legacy {
		legacy.Rules += l.Rules
		legacy.Tables = append(legacy.Tables, string(l.Family)+" "+l.Table)
		fmt.Fprintf(h, "legacy %s %s %d\n", l.Family, l.Table, l.Rules)
	}
	sort.Strings(nft.Tables)
	sort.Strings(legacy.Tables)
	if len(nft.Tables) > maxTables {
		nft.Tables, truncated = nft.Tables[:maxTables], true
	}
	return nft, legacy, hex.EncodeToString(h.Sum(nil)[:16]), truncated
}

func capName(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxName {
		return s
	}
	cut := maxName
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
