package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// `report --by node` and `--by pool` answer "which pool can move to RHEL 10
// first": each node's readiness (findings.Readiness) from the workloads
// seen on it and from the forwarder's node label, and the nodes grouped by
// a label.

// NotSeen is the readiness of a node the cluster lists with neither
// findings nor the forwarder's label: nothing says it was looked at.
const NotSeen = "not-seen"

// DefaultPoolLabel groups nodes by their node-role.kubernetes.io/ roles,
// as MachineConfigPools select them.
const DefaultPoolLabel = "node-role.kubernetes.io/*"

// ReadinessLabel is the label the forwarder keeps on its node
// (lib/nodemark's default).
const ReadinessLabel = "iptables-alerter.io/rhel10"

// NodeRow is one node of `report --by node`.
type NodeRow struct {
	Node string `json:"node"`
	Pool string `json:"pool"`
	// Readiness is the worst of the workloads' on the node and Label:
	// a findings.Readinesses value, or NotSeen.
	Readiness string `json:"readiness"`
	// Label is the node's ReadinessLabel, "" when it has none or the
	// nodes were not read.
	Label string `json:"label"`
	// Workloads are those seen on the node, worst first, as
	// "namespace/Kind/name (level)".
	Workloads []string `json:"workloads"`
}

// PoolRow is one pool of `report --by pool`.
type PoolRow struct {
	Pool      string `json:"pool"`
	Readiness string `json:"readiness"`
	// Nodes counts the pool's nodes by readiness.
	Nodes map[string]int `json:"nodes"`
	// Blocking names the nodes that break, are unknown or not seen;
	// NeedsExtra those that need kernel-modules-extra.
	Blocking   []string `json:"blocking"`
	NeedsExtra []string `json:"needs_extra"`
}

// groupReadiness is a workload's readiness: an unfinished check (a look
// that stopped early too: its worst level is a lower bound) or
// unclassified usage is unknown.
func groupReadiness(g Group) string {
	if g.State == findings.StateUnknown {
		return findings.ReadinessUnknown
	}
	if g.NoRules() {
		// Commands that failed for reasons of their own: no rules.
		return findings.ReadinessReady
	}
	if g.Truncated || g.Unclassified {
		// What breaks stays breaks.
		return findings.WorseReadiness(findings.Readiness(g.Worst), findings.ReadinessUnknown)
	}
	return findings.Readiness(g.Worst)
}

// PoolOf is a node's pool under label: with a trailing "/*" the names
// after the prefix of the labels it has, joined by ","; else the label's
// value; "" when it has none.
func PoolOf(labels map[string]string, label string) string {
	prefix, glob := strings.CutSuffix(label, "*")
	if !glob {
		return labels[label]
	}
	var roles []string
	for k := range labels {
		if r, ok := strings.CutPrefix(k, prefix); ok && r != "" {
			roles = append(roles, r)
		}
	}
	sort.Strings(roles)
	return strings.Join(roles, ",")
}

// ByNode gives one row per node: those the groups were seen on and those
// nodes lists (nil when the nodes were not read), sorted worst first, then
// by name. A workload counts on each node it was seen on at the level of
// its pods there (Group.on): one replica's legacy rules do not hold the
// nodes of the others.
func ByNode(groups []Group, nodes []corev1.Node, poolLabel string) []NodeRow {
	rows, listed := map[string]*NodeRow{}, map[string]bool{}
	row := func(n string) *NodeRow {
		if rows[n] == nil {
			rows[n] = &NodeRow{Node: n, Readiness: NotSeen, Workloads: []string{}}
		}
		return rows[n]
	}
	for _, n := range nodes {
		listed[n.Name] = true
		r := row(n.Name)
		r.Pool, r.Label = PoolOf(n.Labels, poolLabel), n.Labels[ReadinessLabel]
		if r.Label != "" {
			r.Readiness = findings.WorseReadiness(findings.ReadinessReady, r.Label)
		}
	}
	// Worst groups first, so each row's workloads are too.
	sorted := slices.Clone(groups)
	slices.SortStableFunc(sorted, func(a, b Group) int {
		return rank(groupReadiness(a)) - rank(groupReadiness(b))
	})
	for _, g := range sorted {
		name := g.Owner.String()
		if g.Namespace != "" {
			name = g.Namespace + "/" + name
		}
		for _, n := range g.Nodes {
			on := g.on(n)
			gr := groupReadiness(on)
			level := on.Worst
			switch {
			case g.State == findings.StateUnknown:
				level = string(findings.StateUnknown)
			case on.NoRules():
				level = NoRulesWords
			}
			r := row(n)
			if r.Readiness == NotSeen {
				r.Readiness = gr
			} else {
				r.Readiness = findings.WorseReadiness(r.Readiness, gr)
			}
			r.Workloads = append(r.Workloads, name+" ("+level+")")
		}
	}
	out := make([]NodeRow, 0, len(rows))
	for _, r := range rows {
		if listed[r.Node] {
			unvouched(r)
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b NodeRow) int {
		if d := rank(a.Readiness) - rank(b.Readiness); d != 0 {
			return d
		}
		return strings.Compare(a.Node, b.Node)
	})
	return out
}

// rank orders readiness worst first, NotSeen with unknown.
func rank(r string) int {
	if r == NotSeen {
		r = findings.ReadinessUnknown
	}
	return slices.Index(findings.Readinesses, r)
}

// ByPool folds node rows by pool, the pools that can move first (best
// readiness) first, then by name. A pool's readiness is its worst node's.
// A node of several roles ("infra,worker": no label value holds a comma)
// is in each role's pool, as a MachineConfigPool's role selector selects
// it and PoolGate counts it.
func ByPool(rows []NodeRow) []PoolRow {
	pools := map[string]*PoolRow{}
	for _, r := range rows {
		for _, name := range strings.Split(r.Pool, ",") {
			p := pools[name]
			if p == nil {
				p = &PoolRow{Pool: name, Readiness: findings.ReadinessReady, Nodes: map[string]int{}, Blocking: []string{}, NeedsExtra: []string{}}
				pools[name] = p
			}
			p.Nodes[r.Readiness]++
			if rank(r.Readiness) < rank(p.Readiness) || (r.Readiness == NotSeen && p.Readiness == findings.ReadinessUnknown) {
				p.Readiness = r.Readiness
			}
			switch {
			case rank(r.Readiness) <= rank(findings.ReadinessUnknown):
				p.Blocking = append(p.Blocking, r.Node)
			case r.Readiness == findings.ReadinessNeedsExtra:
				p.NeedsExtra = append(p.NeedsExtra, r.Node)
			}
		}
	}
	out := make([]PoolRow, 0, len(pools))
	for _, p := range pools {
		sort.Strings(p.Blocking)
		sort.Strings(p.NeedsExtra)
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b PoolRow) int {
		if d := rank(b.Readiness) - rank(a.Readiness); d != 0 {
			return d
		}
		return strings.Compare(a.Pool, b.Pool)
	})
	return out
}

// ByFormats are the formats of --by node and --by pool.
var ByFormats = []string{"text", "json"}

// WriteByNode writes node rows as a table or JSON.
func WriteByNode(w io.Writer, rows []NodeRow, format string) error {
	if format == "json" {
		return writeRows(w, map[string]any{"nodes": rows})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPOOL\tREADINESS\tLABEL\tWORKLOADS")
	for _, r := range rows {
		ws := strings.Join(r.Workloads, ", ")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(r.Node), cell(r.Pool), r.Readiness, cell(r.Label), safetext.Display(safetext.Cut(ws, TextWidth)))
	}
	return tw.Flush()
}

// WriteByPool writes pool rows as a table or JSON; the text ends with
// the pools that can move first.
func WriteByPool(w io.Writer, rows []PoolRow, format string) error {
	if format == "json" {
		return writeRows(w, map[string]any{"pools": rows})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tREADINESS\tNODES\tBREAKS\tUNKNOWN\tNOT-SEEN\tNEEDS-EXTRA\tREADY\tBLOCKING")
	var first []string
	for _, p := range rows {
		total := 0
		for _, n := range p.Nodes {
			total += n
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", cell(p.Pool), p.Readiness, total,
			p.Nodes[findings.ReadinessBreaks], p.Nodes[findings.ReadinessUnknown], p.Nodes[NotSeen], p.Nodes[findings.ReadinessNeedsExtra], p.Nodes[findings.ReadinessReady],
			safetext.Display(safetext.Cut(strings.Join(p.Blocking, ","), TextWidth)))
		if p.Readiness == findings.ReadinessReady || p.Readiness == findings.ReadinessNeedsExtra {
			first = append(first, cell(p.Pool))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(first) == 0 {
		_, err := fmt.Fprintln(w, "\nNo pool can move to RHEL 10 yet: each has a node that breaks, or was not (fully) seen.")
		return err
	}
	_, err := fmt.Fprintf(w, "\nCan move first: %s (needs-extra: install kernel-modules-extra or fix the xt rules first).\n", strings.Join(first, ", "))
	return err
}

// cell is a name for the table: escaped, "-" when empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return safetext.Display(safetext.Cut(s, 80))
}

// writeRows writes v as one indented JSON document, escaped as writeJSON
// does.
func writeRows(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	_, err := w.Write(safetext.JSON(b.Bytes()))
	return err
}

// PoolGate is the verdict of `report --by pool --pool NAME`, a pool's
// gate where no admission policy gates it (a plain cluster's upgrade
// pipeline): 0 when every node of the pool is ready (or needs-extra too,
// with allowExtra: the nodes will have kernel-modules-extra), 1 when one
// is not, with why naming the nodes; 2 when no node is in the pool.
// Unknown and not-seen block, as breaks does: not everything was seen;
// so does a node without the forwarder's label.
// Under a pool label ending in "/*" (roles), a node of several roles
// ("infra,worker") is in each of their pools, as a MachineConfigPool's
// role selector selects it. why is escaped for a terminal (node and pool
// names are labels).
func PoolGate(rows []NodeRow, poolLabel, name string, allowExtra bool) (code int, why string) {
	roles := strings.HasSuffix(poolLabel, "*")
	var in []NodeRow
	unlabelled := 0
	for _, r := range rows {
		if r.Pool == name || roles && slices.Contains(strings.Split(r.Pool, ","), name) {
			r.Pool = name
			if unvouched(&r) {
				unlabelled++
			}
			in = append(in, r)
		}
	}
	code, why = poolGate(ByPool(in), name, allowExtra)
	if code == 1 && unlabelled > 0 {
		why += fmt.Sprintf("; %d node(s) without the %s label, which the forwarder keeps (forward --node-label, packaging/rbac/node-label.yaml)", unlabelled, ReadinessLabel)
	}
	return code, safetext.Display(why)
}

// unvouched makes a node without the forwarder's label not seen, whatever
// its findings say, unless they say it breaks, and tells whether it is
// such a node: only the label carries the agent's word that it looked at
// every pod (a clean pod leaves no finding), and an Event or a Report
// result naming the node could be anyone's.
func unvouched(r *NodeRow) bool {
	if r.Label != "" {
		return false
	}
	if rank(r.Readiness) > rank(NotSeen) {
		r.Readiness = NotSeen
	}
	return r.Readiness == NotSeen
}

func poolGate(pools []PoolRow, name string, allowExtra bool) (code int, why string) {
	i := slices.IndexFunc(pools, func(p PoolRow) bool { return p.Pool == name })
	if i < 0 {
		return 2, fmt.Sprintf("no node is in pool %q", name)
	}
	p := pools[i]
	if p.Readiness == findings.ReadinessReady || allowExtra && p.Readiness == findings.ReadinessNeedsExtra {
		return 0, fmt.Sprintf("pool %q can move to RHEL 10: %s", name, poolCounts(p))
	}
	why = fmt.Sprintf("pool %q is not ready for RHEL 10 (%s): %s", name, p.Readiness, poolCounts(p))
	if len(p.Blocking) > 0 {
		why += "; blocking: " + strings.Join(p.Blocking, ", ")
	}
	if len(p.NeedsExtra) > 0 && !allowExtra {
		why += "; needs-extra: " + strings.Join(p.NeedsExtra, ", ") + " (they pass with --allow-needs-extra once they have kernel-modules-extra)"
	}
	return 1, why
}

// poolCounts says how many of p's nodes are at each readiness, worst
// first.
func poolCounts(p PoolRow) string {
	var parts []string
	for _, r := range []string{findings.ReadinessBreaks, NotSeen, findings.ReadinessUnknown, findings.ReadinessNeedsExtra, findings.ReadinessReady} {
		if n := p.Nodes[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, r))
		}
	}
	return strings.Join(parts, ", ")
}
