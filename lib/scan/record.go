package scan

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/modules"
)

// Meta is what the entry point knows about the scan: who triggered it and
// where. It goes into the record as given.
type Meta struct {
	Node string
	// Subject is the record's (findings.Subject): "" is a pod.
	Subject     findings.Subject
	Source      string // "hook"; the agent's "sweep", "poststart", "stop"; "scan"
	Stage       string
	ContainerID string
	SandboxID   string
	Pod         findings.Pod
	Container   string
	Image       string
	Netns       string
	// Owner is the workload the agent read from the pod's labels (see
	// lib/agent), for its metrics only: not recorded, consumers with API
	// access resolve the owner themselves.
	Owner string
}

// MaxName caps table and chain names (attacker-chosen) in examples and in
// render's output.
const MaxName = 64

// maxExampleCandidates bounds how many remaining rules are rendered to pick
// the examples from: rendering costs, and the first rules tell enough.
const maxExampleCandidates = 64

// candidates are the rules rendered for the examples and vendors: the first
// maxExampleCandidates, and the first later rule of each level they lack,
// so that one xt rule behind many native ones is still shown.
func candidates(all []inspect.Rule) []inspect.Rule {
	if len(all) <= maxExampleCandidates {
		return all
	}
	// A full slice expression: appending copies, never writes into all.
	out := all[:maxExampleCandidates:maxExampleCandidates]
	have := map[string]bool{}
	for _, r := range out {
		have[classify.Level(r)] = true
	}
	for _, r := range all[maxExampleCandidates:] {
		if have[findings.ImpactXt] && have[findings.ImpactNative] {
			break
		}
		if l := classify.Level(r); !have[l] {
			have[l] = true
			out = append(out, r)
		}
	}
	return out
}

// Build makes the record of a scan, State present when it holds usage and
// unknown otherwise (Decide says gone for a complete look without usage).
// An incomplete scan's fingerprint is
// derived from, and differs from, that of the same rules seen completely:
// the per-sandbox memory compares fingerprints, and must not skip the
// complete finding that a later scan gives. A node's record (Subject node)
// names the node only: the Meta's sandbox id is the memory's key.
func Build(m Meta, res Result) findings.Record {
	rec, _ := build(m, res)
	return rec
}

// build is Build, and the summary the record was made from.
func build(m Meta, res Result) (findings.Record, classify.Summary) {
	sum := classify.Summarize(res.Usage)
	fp := sum.Fingerprint
	if !res.Complete() {
		fp = incomplete(fp)
	}
	rec := findings.Record{
		Time:             findings.Now(),
		Node:             m.Node,
		Subject:          m.Subject,
		Source:           m.Source,
		Stage:            m.Stage,
		ContainerID:      m.ContainerID,
		SandboxID:        m.SandboxID,
		Pod:              m.Pod,
		Container:        m.Container,
		Image:            m.Image,
		Netns:            m.Netns,
		Nft:              findings.Nft{Tables: sum.NftTables, PerTable: sum.NftPerTable, Chains: sum.NftChains, Rules: sum.NftRules},
		Legacy:           findings.Legacy{Tables: sum.LegacyTables, Rules: sum.LegacyRules},
		Allowlisted:      res.Allowed.Count,
		AllowlistEntries: res.Allowed.Entries,
		Impact:           sum.Impact,
		Worst:            sum.Worst,
		Modules:          modules.Of(res.Usage),
		MixedBackends:    sum.MixedBackends,
		Fingerprint:      fp,
		Truncated:        !res.Complete(),
		ListsCut:         sum.ListsCut,
	}
	// Rendering costs: each candidate rule is rendered once, for the
	// examples and the vendor table both.
	rules := candidates(res.Usage.Rules)
	texts := make([]string, len(rules))
	for i, r := range rules {
		texts[i] = res.Text(r)
	}
	// Usage seen is present, even when the look stopped early (the counts
	// are then a lower bound); none seen is unknown, as Decide records
	// only an incomplete look without usage.
	rec.State = rec.KnownState()
	rec.Subject = rec.KnownSubject()
	if rec.Subject == findings.SubjectNode {
		rec.SandboxID, rec.ContainerID, rec.Container = "", "", ""
	}
	legacy := res.Usage.LegacyRules[:min(len(res.Usage.LegacyRules), maxExampleCandidates)]
	ltexts := make([]string, len(legacy))
	for i, r := range legacy {
		ltexts[i] = res.LegacyText(r)
	}
	rec.Examples = findings.PickExamples(append(examples(rules, texts), legacyExamples(legacy, ltexts)...))
	rec.ExamplesLeftOut = rec.LeftOut()
	rec.Vendors = Vendors(res.Vendors, res.Usage, rules, texts, ltexts)
	if rec.Subject == findings.SubjectNode {
		// "Chains in a pod" would be wrong under Node/NAME.
		rec.Vendors = res.Vendors.ForNode(rec.Vendors)
	}
	if res.Err != nil {
		rec.Error = res.Err.Error()
	}
	return rec, sum
}

// Vendors matches the usage against the vendor table: the names of every
// chain still holding usage (kept in detail or not, legacy user chains
// included) and the rendered rules; ltexts are the texts of the first
// legacy rules (u.LegacyRules).
func Vendors(t *catalog.Table, u classify.Usage, rules []inspect.Rule, texts, ltexts []string) []findings.Vendor {
	if t == nil {
		return nil
	}
	var chains []string
	for _, c := range u.Chains {
		if c.Used() {
			chains = append(chains, c.Name)
		}
	}
	for _, l := range u.Legacy {
		chains = append(chains, l.Chains...)
	}
	rt := make([]catalog.RuleText, len(rules))
	for i, r := range rules {
		rt[i] = catalog.RuleText{Chain: r.Chain, Text: texts[i]}
	}
	for i, text := range ltexts {
		rt = append(rt, catalog.RuleText{Chain: u.LegacyRules[i].Chain, Text: text})
	}
	return t.Match(chains, rt)
}

// incomplete marks a fingerprint as that of a partial view, keeping its
// length and alphabet.
func incomplete(fp string) string {
	sum := sha256.Sum256([]byte("incomplete " + fp))
	return hex.EncodeToString(sum[:16])
}

// Examples picks, from the remaining usage rules and their texts, those an
// admin should see first.
func Examples(rules []inspect.Rule, texts []string) []findings.Example {
	return findings.PickExamples(examples(rules, texts))
}

// legacyExamples are the legacy rules as examples, at level legacy.
func legacyExamples(rules []inspect.LegacyRule, texts []string) []findings.Example {
	all := make([]findings.Example, 0, len(rules))
	for i, r := range rules {
		all = append(all, example(r.Family, r.Table, r.Chain, texts[i], findings.ImpactLegacy))
	}
	return all
}

// examples are the nftables usage rules as examples, at their levels.
func examples(rules []inspect.Rule, texts []string) []findings.Example {
	all := make([]findings.Example, 0, len(rules))
	for i, r := range rules {
		all = append(all, example(r.Family, r.Table, r.Chain, texts[i], classify.Level(r)))
	}
	return all
}

// example is one rule as an example, its names bounded.
func example(fam inspect.Family, table, chain, text, level string) findings.Example {
	return findings.Example{
		Family: string(fam),
		Table:  safetext.Name(table, MaxName),
		Chain:  safetext.Name(chain, MaxName),
		Rule:   text,
		Impact: level,
	}
}
