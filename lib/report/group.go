package report

import (
	"slices"
	"sort"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
)

// Group is one owning workload: every finding of its pods.
type Group struct {
	// Cluster is the kubeconfig context of the cluster the group is in,
	// in a report over several clusters (ReadFleet); "" otherwise.
	Cluster   string      `json:"cluster,omitempty"`
	Namespace string      `json:"namespace"`
	Owner     owner.Owner `json:"owner"`
	Pods      []string    `json:"pods"`
	Nodes     []string    `json:"nodes"`
	// Worst is the worst level among the pods' levels, "" when none was
	// classified. A pod's level is its latest complete look's,
	// as its counts are (newer); a look after it that stopped early or
	// held rules of no known level keeps a worse level seen before (rules
	// not seen may still be there), and a command's own finding
	// (commandOnly) counts its level when worse, whenever it was.
	Worst   string            `json:"worst"`
	Vendors []findings.Vendor `json:"vendors"`
	// Example is an example rule, at the worst level when one is shown
	// (a finding written before legacy rules were decoded shows none at
	// legacy: the group then shows its other rules); ExampleImpact is its
	// level, "" when not known.
	Example       string `json:"example"`
	ExampleImpact string `json:"example_impact"`
	// Examples are up to MaxExamples distinct example rules of the group's
	// findings, breaking ones first; none from a look at a level worse
	// than Worst (one a later complete look replaced: byLevel).
	Examples []findings.Example `json:"examples"`
	// Impact counts rules per level: each pod once, by its newest
	// complete look (newer), summed over the group's pods. A pod is looked
	// at again and again, and its findings repeat its rules.
	Impact findings.Impact `json:"impact"`
	// Modules are the kernel modules the group's breaking rules need that
	// a RHEL 10 release may lack (findings.Modules.Judged), from findings files
	// (Events and Reports do not carry them); Kernel says what the target
	// release's kernel packages give them (modules.Table.Words), "" when
	// there is nothing to say. As Examples, none from a look at a level
	// worse than Worst.
	Modules []string `json:"modules"`
	Kernel  string   `json:"kernel"`
	// Truncated is true when a pod's latest look at its rules stopped
	// early (Item.Truncated: a rule over 32 KiB hides the later ones, the
	// x_tables lock kept busy hides the legacy ones): Worst is then a lower
	// bound, and under --fail-on breaks the group is not known to be safe.
	Truncated bool `json:"truncated"`
	// Unclassified is true when a pod's latest look at its rules held
	// rules of no known level beside the ones Worst counts (an item whose
	// Worst is ""): they may break, so under --fail-on breaks the group
	// is not known to be safe, as a group whose Worst is "" is not.
	Unclassified bool `json:"unclassified"`
	// MixedBackends is true when a pod of the group held iptables rules
	// in both legacy x_tables and nftables: tools reading one backend
	// (iptables-legacy-save, iptables-nft-save, a CNI's own check) do not
	// see the other's.
	MixedBackends bool `json:"mixed_backends"`
	// Findings counts the items folded in.
	Findings int `json:"findings"`
	// Expected is true when the expectations cover, in each finding,
	// every rule that breaks, or every native one when nothing breaks
	// (expect); Reasons are the covering expectations' reasons.
	Expected bool     `json:"expected"`
	Reasons  []string `json:"reasons"`
	// Fails is the verdict under the --fail-on mode.
	Fails bool `json:"fails"`
	// State is present for usage, unknown for pods of the workload whose
	// inspection could not finish without any usage known: their own
	// group (status error), never expected, Error the first one's why.
	State findings.State `json:"state"`
	Error string         `json:"error"`
	// Writers name, for up to MaxWriters distinct ones, the process whose
	// change the agent's watch looked after (wording.WriterLine).
	Writers []string `json:"writers"`
	// Commands are, for up to MaxWriters distinct ones, the iptables
	// commands the exec watch saw (wording.ExecLine), failed ones first
	// to stay: a failure is never crowded out by reads.
	Commands []string `json:"commands"`
	// CommandsOnly is true when every finding of the group is a
	// command's own (the exec watch's: commandOnly), none a look at its
	// rules. With no level among them (a write that failed for a reason
	// of its own, not missing kernel support), Worst is "" with no rules
	// behind it, which says nothing of RHEL 10 (NoRules).
	CommandsOnly bool `json:"commands_only"`

	// onNode is, per node of Nodes, what the group's pods there say
	// (ByNode): a workload whose pod on one node has legacy rules does
	// not break its other nodes. Nil for groups not made by a grouping.
	onNode map[string]nodeLook
}

// nodeLook is a group's level on one node: its pods' there, as Worst,
// Truncated, Unclassified and CommandsOnly are its pods' everywhere.
type nodeLook struct {
	rank                    int
	truncated, unclassified bool
	rules                   bool
}

// on is the group as its pods on node make it, for its readiness there;
// the whole group for a node it has no look of.
func (g Group) on(node string) Group {
	nl, ok := g.onNode[node]
	if !ok {
		return g
	}
	level := ""
	if nl.rank < classified {
		level = findings.ImpactLevels[nl.rank]
	}
	return Group{State: g.State, Worst: level, Truncated: nl.truncated, Unclassified: nl.unclassified, CommandsOnly: !nl.rules}
}

// NoRules tells a group whose findings are all commands' own and hold no
// level: nothing of it is known to break, nor unclassified.
func (g Group) NoRules() bool { return g.CommandsOnly && g.Worst == "" }

// MixedWords says what MixedBackends means, for the writers.
const MixedWords = "mixed: rules in both legacy x_tables and nftables (iptables-nft); a tool that reads one backend does not see the other's rules"

// VendorNames names the group's vendors, "unknown" for none.
func (g Group) VendorNames() string {
	if len(g.Vendors) == 0 {
		return findings.VendorUnknown
	}
	s := ""
	for i, v := range g.Vendors {
		if i > 0 {
			s += ","
		}
		s += v.Name
	}
	return s
}

// Hint is the first vendor's hint.
func (g Group) Hint() (hint, doc string) {
	for _, v := range g.Vendors {
		if v.Hint != "" {
			return v.Hint, v.Doc
		}
	}
	return "", ""
}

// GroupItems folds items by namespace, owner and state, judging each
// against the expectations, after Settle. Groups come worst first, then by
// namespace and owner; unknown groups last.
func GroupItems(items []Item, exps []Expectation) []Group {
	g := newGrouping(exps)
	for _, it := range Settle(items) {
		g.add(it)
	}
	return g.groups()
}

// grouping folds items into groups one at a time, so that a report over
// a cluster's 100,000 results need not hold them (collector): what a group
// keeps of its items is their sets and, per pod, the look that counts. Its
// items themselves are kept only for expectations to judge; without any, a
// group is never expected (expect), which one item at its worst level
// shows.
type grouping struct {
	exps []Expectation
	idx  map[groupKey]int
	gs   []Group
	ss   []groupSets
	// members holds each group's items (expect), or without expectations
	// one at its Worst (groups).
	members [][]Item
	// picks are, per group and level rank (ImpactRank; the last for none),
	// what a Worst of that rank shows.
	picks [][classified + 1]pick
	// looks holds, per group, each pod's look that counts (newer).
	looks []map[podKey]look
	// levels holds, per group, its examples and modules by level.
	levels []byLevel
	// podsSet is, per group, how many of its Pods were a set last.
	podsSet []int
	// lastModules and lastJudged are the last item's modules and their
	// Judged: the items of one Report share their lists (resultCache).
	lastModules findings.Modules
	lastJudged  []string
}

// judged is m.Judged(), made again only when m's lists are not the last
// item's very lists.
func (gr *grouping) judged(m findings.Modules) []string {
	same := func(a, b []string) bool { return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) }
	if gr.lastJudged == nil || !same(m.Legacy, gr.lastModules.Legacy) || !same(m.Xt, gr.lastModules.Xt) || !same(m.Native, gr.lastModules.Native) {
		gr.lastModules, gr.lastJudged = m, m.Judged()
		if gr.lastJudged == nil {
			gr.lastJudged = []string{}
		}
	}
	return gr.lastJudged
}

type groupKey struct {
	ns, kind, name string
	state          findings.State
}

type groupSets struct{ nodes, reasons, vendors, writers map[string]bool }

// byLevel keeps a group's example rules and modules by the level of the
// look that showed them (ImpactRank; the last for none): a look a later
// complete one replaced says nothing of the pod now (podLevel), and what
// a group shows must not be worse than its Worst (the rules of a pod
// whose legacy rules were removed, the modules they needed).
type byLevel struct {
	examples [classified + 1][]findings.Example
	modules  [classified + 1]map[string]bool
}

// at gives what looks of the group's Worst's rank or milder showed:
// examples worst first, as mergeExamples keeps them, and modules sorted.
func (b *byLevel) at(worst int) ([]findings.Example, []string) {
	exs, mods := []findings.Example{}, []string{}
	for r := worst; r <= classified; r++ {
		exs = mergeExamples(exs, b.examples[r])
		for m := range b.modules[r] {
			mods = append(mods, m)
		}
	}
	return exs, sortedSet(mods)
}

// pick is what a group whose Worst has one rank shows: the level as
// written, the first item of it and the example of the first of its items
// with one (exampleAt).
type pick struct {
	has             bool
	level           string
	member          Item
	example, impact string
}

// classified counts the levels that rank (findings.ImpactLevels).
const classified = 3

// podLevel is what a pod's looks say of its level, whatever order they
// are read in: per level, the time of its latest look at that level
// (at, set); the time of its latest complete look with every rule
// classified (whole), before which no look's level counts; and the levels
// of its commands' own findings (cmd), which always count. Only a findings
// file's look is whole: an Event or a Report result (Item.Posted) could
// be anyone's in the namespace, and a forged complete look must not lower
// a level seen before.
type podLevel struct {
	at       [classified]time.Time
	set, cmd uint8
	whole    time.Time
	hasWhole bool
}

func (p *podLevel) add(it Item) {
	r := findings.ImpactRank(it.Worst)
	switch {
	case r >= classified:
		// No level known: the levels seen before stay.
	case commandOnly(it):
		p.cmd |= 1 << r
	default:
		if p.set&(1<<r) == 0 || it.Time.After(p.at[r]) {
			p.at[r] = it.Time
			p.set |= 1 << r
		}
		if !it.Truncated && !it.Posted && (!p.hasWhole || it.Time.After(p.whole)) {
			p.whole, p.hasWhole = it.Time, true
		}
	}
}

// counts tells whether it still says something of the pod's level: a
// command's own finding always does, a look only when no complete look
// is later (at the same time too, as in rank).
func (p podLevel) counts(it Item) bool {
	return commandOnly(it) || !p.hasWhole || !it.Time.Before(p.whole)
}

// rank is the pod's level's rank: the worst of its commands' own findings
// and of its looks as new as its latest complete one (at the same time
// too: which of two was the latest is not known), or all of them when it
// has none.
func (p *podLevel) rank() int {
	for r := range classified {
		if p.cmd&(1<<r) != 0 || p.set&(1<<r) != 0 && (!p.hasWhole || !p.at[r].Before(p.whole)) {
			return r
		}
	}
	return classified
}

// look is what newer and the impact's sum read of a pod's item; latest,
// latestCut and latestRaw are the time of the pod's latest look at its
// rules in a findings file, whether it stopped early (Group.Truncated)
// and whether it held rules not classified (Group.Unclassified),
// whichever look counts.
type look struct {
	impact       findings.Impact
	truncated    bool
	unclassified bool
	commandOnly  bool
	time         time.Time
	latest       time.Time
	latestCut    bool
	latestRaw    bool
	// rules: latest is a look at the rules' (a command's own finding is
	// none), which a zero time cannot tell.
	rules bool
	// postedCut and postedRaw are the times of the pod's latest Event or
	// Report result (Item.Posted) that stopped early or held rules not
	// classified (hasCut, hasRaw). A later posted look is no answer to
	// them: it could be forged by anyone who may write one in the
	// namespace. own is the time of the pod's latest look at its rules
	// from a findings file (hasOwn), the only one that answers them, and
	// an unknown look (sawLater).
	postedCut, postedRaw time.Time
	hasCut, hasRaw       bool
	own                  time.Time
	hasOwn               bool
	// level is kept over all the pod's looks, whichever counts.
	level podLevel
	// node is the pod's node, the first its looks name; moved whether
	// a later one named another (a forged Event can: its level then
	// counts on every node of the group, ByNode). anyRules is whether a
	// look of it, not a command's own, was read.
	node     string
	moved    bool
	anyRules bool
}

func lookOf(it Item) look {
	return look{impact: it.Impact, truncated: it.Truncated, unclassified: it.Worst == "", commandOnly: commandOnly(it), time: it.Time, node: it.Node}
}

func newGrouping(exps []Expectation) *grouping {
	return &grouping{exps: exps, idx: map[groupKey]int{}}
}

// add folds it into its group.
func (gr *grouping) add(it Item) {
	k := groupKey{it.Namespace, it.Owner.Kind, it.Owner.Name, it.State}
	i, ok := gr.idx[k]
	if !ok {
		i = len(gr.gs)
		gr.idx[k] = i
		gr.gs = append(gr.gs, Group{Namespace: it.Namespace, Owner: it.Owner, Worst: it.Worst, Expected: true, State: it.State,
			Pods: []string{}, Nodes: []string{}, Modules: []string{}, Vendors: []findings.Vendor{}, Reasons: []string{}, Examples: []findings.Example{}, Writers: []string{}, Commands: []string{}})
		gr.ss = append(gr.ss, groupSets{map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}})
		gr.levels = append(gr.levels, byLevel{})
		gr.members = append(gr.members, []Item{it})
		gr.picks = append(gr.picks, [classified + 1]pick{})
		gr.looks = append(gr.looks, map[podKey]look{})
		gr.podsSet = append(gr.podsSet, 0)
	} else if len(gr.exps) > 0 {
		gr.members[i] = append(gr.members[i], it)
	}
	g, s := &gr.gs[i], &gr.ss[i]
	g.Findings++
	g.MixedBackends = g.MixedBackends || it.MixedBackends
	lv, r := &gr.levels[i], min(findings.ImpactRank(it.Worst), classified)
	for _, m := range gr.judged(it.Modules) {
		if lv.modules[r] == nil {
			lv.modules[r] = map[string]bool{}
		}
		lv.modules[r][m] = true
	}
	lv.examples[r] = mergeExamples(lv.examples[r], it.Examples)
	if it.Pod != "" {
		// A set made at the end (sortedSet): a map per group, grown
		// pod by pod, was a tenth of the report's CPU over 100,000
		// pods. Repeats are dropped as they pile up.
		g.Pods = append(g.Pods, it.Pod)
		if len(g.Pods) >= 2*gr.podsSet[i]+64 {
			g.Pods = sortedSet(g.Pods)
			gr.podsSet[i] = len(g.Pods)
		}
	}
	add(&g.Nodes, s.nodes, it.Node)
	if len(g.Writers) < MaxWriters {
		add(&g.Writers, s.writers, it.Writer)
	}
	addCommand(&g.Commands, it.Command)
	for _, v := range it.Vendors {
		if !s.vendors[v.Name] {
			s.vendors[v.Name] = true
			g.Vendors = append(g.Vendors, v)
		}
	}
	// The example shows the worst level's rule: each level's is kept
	// until the pods' levels are known (groups).
	pk := &gr.picks[i][min(findings.ImpactRank(it.Worst), classified)]
	if !pk.has {
		pk.has, pk.level, pk.member = true, it.Worst, it
	}
	if pk.example == "" {
		if ex, ok := exampleAt(it.Examples, it.Worst); ok {
			pk.example, pk.impact, pk.member = ex.Rule, ex.Impact, it
		}
	}
	if g.Error == "" {
		g.Error = it.Error
	}
	p, l := podOf(it), lookOf(it)
	had, ok := gr.looks[i][p]
	keep := had
	if !ok || newer(l, had) {
		keep = l
		keep.latest, keep.latestCut, keep.latestRaw, keep.rules = had.latest, had.latestCut, had.latestRaw, had.rules
	}
	keep.level = had.level
	keep.level.add(it)
	keep.anyRules = had.anyRules || !l.commandOnly
	if ok {
		keep.node, keep.moved = had.node, had.moved
	}
	// A look naming no node, or another: no node's row may lose the pod.
	keep.moved = keep.moved || l.node == "" || l.node != keep.node
	// A complete look counts before a cut one (newer), but a cut look
	// after it says the pod's rules are no longer all seen: a pod can
	// show a native rule, then hide the rules that break behind one over
	// 32 KiB or the busy x_tables lock. So with rules not classified: a
	// group's Worst ranks them below native.
	// A posted look (Item.Posted) could be forged: its doubts are kept
	// below, and it clears none of a findings file's.
	if !l.commandOnly && !it.Posted && (!ok || !l.time.Before(had.latest)) {
		keep.latest, keep.latestCut, keep.latestRaw, keep.rules = l.time, l.truncated, l.unclassified, true
	}
	keep.postedCut, keep.postedRaw, keep.hasCut, keep.hasRaw, keep.own, keep.hasOwn = had.postedCut, had.postedRaw, had.hasCut, had.hasRaw, had.own, had.hasOwn
	switch {
	case l.commandOnly:
	case it.Posted:
		latest(&keep.postedCut, &keep.hasCut, l.time, l.truncated)
		latest(&keep.postedRaw, &keep.hasRaw, l.time, l.unclassified)
	default:
		latest(&keep.own, &keep.hasOwn, l.time, true)
	}
	gr.looks[i][p] = keep
}

// latest sets *at to t when cond and t is later (or *has is false).
func latest(at *time.Time, has *bool, t time.Time, cond bool) {
	if cond && (!*has || t.After(*at)) {
		*at, *has = t, true
	}
}

// doubt tells whether a posted look's doubt at t (has) stands: no
// findings file's look of the pod is later.
func (l look) doubt(has bool, t time.Time) bool {
	return has && !(l.hasOwn && l.own.After(t))
}

// groups judges and sorts the groups folded.
func (gr *grouping) groups() []Group {
	gs := gr.gs
	for i := range gs {
		worst, rules := classified, false
		// By node only where there is more than one: on one, the
		// group's level is its pods' there (and a look is spared the
		// map, over a cluster's 100,000 results).
		var onNode map[string]nodeLook
		if len(gs[i].Nodes) > 1 {
			onNode = map[string]nodeLook{}
		}
		for _, l := range gr.looks[i] {
			worst = min(worst, l.level.rank())
			rules = rules || l.anyRules
			if l.moved {
				// Its level on every node of the group: a look must not
				// take a pod, and its level, away from a node.
				onNode = nil
			}
			cut := (l.latestCut || l.doubt(l.hasCut, l.postedCut)) && gs[i].State != findings.StateUnknown
			raw := (l.latestRaw || l.doubt(l.hasRaw, l.postedRaw)) && gs[i].State != findings.StateUnknown
			gs[i].Impact.Legacy += l.impact.Legacy
			gs[i].Impact.Xt += l.impact.Xt
			gs[i].Impact.Native += l.impact.Native
			gs[i].Truncated = gs[i].Truncated || cut
			gs[i].Unclassified = gs[i].Unclassified || raw
			if onNode != nil {
				nl, ok := onNode[l.node]
				if !ok {
					nl.rank = classified
				}
				nl.rank = min(nl.rank, l.level.rank())
				nl.truncated, nl.unclassified, nl.rules = nl.truncated || cut, nl.unclassified || raw, nl.rules || l.anyRules
				onNode[l.node] = nl
			}
		}
		pk := gr.picks[i][worst]
		gs[i].Worst, gs[i].Example, gs[i].ExampleImpact = pk.level, pk.example, pk.impact
		gs[i].Examples, gs[i].Modules = gr.levels[i].at(worst)
		gs[i].CommandsOnly = !rules
		gs[i].onNode = onNode
		if len(gr.exps) == 0 {
			gr.members[i][0] = pk.member
		} else {
			// A look that a later complete one replaced says nothing of
			// the pod now, as it says nothing of its level (podLevel).
			looks := gr.looks[i]
			gr.members[i] = slices.DeleteFunc(gr.members[i], func(it Item) bool { return !looks[podOf(it)].level.counts(it) })
		}
		expect(&gs[i], gr.members[i], gr.exps, gr.ss[i].reasons)
		if !gs[i].Expected {
			gs[i].Reasons = []string{}
		}
		gs[i].Pods = sortedSet(gs[i].Pods)
		sort.Strings(gs[i].Nodes)
	}
	sortGroups(gs)
	return gs
}

// collector groups a cluster's items as they are read (Read), settled as
// GroupItems settles them: present items are folded at once; unknown ones
// are held until all are read, then folded unless their pod has a later
// present look from a findings file (sawLater; a cluster's items are all
// posted, so none now: an unknown Event or result stands while it lives). A cluster's sources give no gone items (a finding's clearing is a
// findings file's), so no present item is ever taken back; and groups are
// by state, so folding the unknown ones last changes no group.
type collector struct {
	// ns keeps the items of one namespace, all when "" (InNamespace).
	ns   string
	g    *grouping
	held []Item
}

func newCollector(ns string, exps []Expectation) *collector {
	return &collector{ns: ns, g: newGrouping(exps)}
}

func (c *collector) add(it Item) {
	switch {
	case c.ns != "" && it.Namespace != c.ns:
	case it.State == findings.StatePresent:
		c.g.add(it)
	default:
		c.held = append(c.held, it)
	}
}

func (c *collector) groups() []Group {
	// The pods with a present item: the latest look of the present
	// groups at their rules.
	present := map[podKey]time.Time{}
	if len(c.held) > 0 {
		for i, g := range c.g.gs {
			if g.State == findings.StatePresent {
				for p, l := range c.g.looks[i] {
					if t, ok := present[p]; l.hasOwn && (!ok || l.own.After(t)) {
						present[p] = l.own
					}
				}
			}
		}
	}
	for _, it := range c.held {
		if it.State == findings.StateGone || it.State == findings.StateUnknown && sawLater(present, it) {
			continue
		}
		c.g.add(it)
	}
	return c.g.groups()
}

// sortGroups orders groups worst first, then by cluster, namespace and
// owner; unknown groups last.
func sortGroups(gs []Group) {
	sort.SliceStable(gs, func(a, b int) bool {
		if ua, ub := gs[a].State == findings.StateUnknown, gs[b].State == findings.StateUnknown; ua != ub {
			return ub
		}
		ra, rb := findings.ImpactRank(gs[a].Worst), findings.ImpactRank(gs[b].Worst)
		if ra != rb {
			return ra < rb
		}
		if gs[a].Cluster != gs[b].Cluster {
			return gs[a].Cluster < gs[b].Cluster
		}
		if gs[a].Namespace != gs[b].Namespace {
			return gs[a].Namespace < gs[b].Namespace
		}
		return gs[a].Owner.String() < gs[b].Owner.String()
	})
}

// expect sets g.Expected: the expectations cover, in each finding, every
// level that breaks on RHEL 10 (legacy, xt), or the native level when
// nothing of g breaks; all of a finding not classified, whose rules may be
// at any level; and never an unknown look, which holds no usage to cover.
// So a workload is expected only when its usage at its worst level is,
// and a breaking rule left out keeps it failing --fail-on breaks; native
// usage beside a breaking one is not judged: it keeps loading.
func expect(g *Group, members []Item, exps []Expectation, seen map[string]bool) {
	for _, it := range members {
		for _, level := range judged(it, g.Worst) {
			reasons, ok := Cover(exps, it, level)
			if !ok {
				g.Expected = false
				return
			}
			for _, r := range reasons {
				add(&g.Reasons, seen, r)
			}
		}
	}
}

// judged lists the levels of it that expect judges, in a group whose
// worst level is worst.
func judged(it Item, worst string) []string {
	if it.State == findings.StateUnknown || it.Worst == "" {
		return []string{it.Worst}
	}
	var levels []string
	for _, l := range findings.ImpactLevels {
		if (findings.Breaks(l) || worst == l) && (it.Worst == l || it.Impact.Count(l) > 0) {
			levels = append(levels, l)
		}
	}
	return levels
}

// Settle keeps what the items still say of each pod (by namespace and UID,
// or name when the UID is not known): a gone item takes away the pod's
// items up to its time, and itself; an unknown item is dropped when the
// pod has a present look at its rules as new or newer, which says more
// (sawLater). Order is kept.
func Settle(items []Item) []Item {
	gone := map[podKey]time.Time{}
	for _, it := range items {
		if k := podOf(it); it.State == findings.StateGone && !it.Time.Before(gone[k]) {
			gone[k] = it.Time
		}
	}
	// Room for all at once: grown by append, a cluster's 100,000 Items
	// left copies of twice their size behind.
	kept := make([]Item, 0, len(items))
	present := map[podKey]time.Time{}
	for _, it := range items {
		k := podOf(it)
		if t, ok := gone[k]; it.State == findings.StateGone || ok && !it.Time.After(t) {
			continue
		}
		if t, ok := present[k]; it.State == findings.StatePresent && !commandOnly(it) && !it.Posted && (!ok || it.Time.After(t)) {
			present[k] = it.Time
		}
		kept = append(kept, it)
	}
	out := kept[:0]
	for _, it := range kept {
		if it.State == findings.StateUnknown && sawLater(present, it) {
			continue
		}
		out = append(out, it)
	}
	return out
}

// sawLater tells whether the unknown item it's pod has a present look at
// its rules (present: the latest, by pod, from a findings file: an Event
// or a Report result could be forged) as new as it or newer: that look
// says more. A look that could not finish after the last complete one
// says the pod's rules are no longer all seen (a pod can show a native
// rule, then keep the x_tables lock busy over its legacy ones): it stays,
// its own unknown group, beside the usage seen before. A command's own
// finding (no rules) is no look at the rules.
func sawLater(present map[podKey]time.Time, it Item) bool {
	t, ok := present[podOf(it)]
	return ok && !t.Before(it.Time)
}

// podKey names the pod (or node) an item is about.
type podKey struct{ ns, id string }

// podOf is the item's pod: by namespace and UID, or name when the UID is
// not known; a node finding's node.
func podOf(it Item) podKey {
	if it.Owner.Kind == KindNode {
		// Keyed by namespace too (a node's has none), so that nothing
		// of a namespace can stand for the node's look.
		return podKey{it.Namespace, "node:" + it.Node}
	}
	if it.PodUID != "" {
		return podKey{it.Namespace, it.PodUID}
	}
	return podKey{it.Namespace, "name:" + it.Pod}
}

// newer reports whether look a of a pod says more than look b of the same
// pod: a complete look beats a cut one (Truncated: its counts are a lower
// bound), then the later one wins, and at equal times (Events before
// their times were read, files of one second) the one read last, a.
func newer(a, b look) bool {
	// A command's own finding (a failed write, a read: no rules) is no
	// look at the rules: any look is newer.
	if a.commandOnly != b.commandOnly {
		return b.commandOnly
	}
	if a.truncated != b.truncated {
		return b.truncated
	}
	return !a.time.Before(b.time)
}

// exampleAt picks the first example at level, else the first at the
// worst level the examples have.
func exampleAt(exs []findings.Example, level string) (findings.Example, bool) {
	best := -1
	for i, ex := range exs {
		if ex.Impact == level {
			return ex, true
		}
		if best < 0 || findings.ImpactRank(ex.Impact) < findings.ImpactRank(exs[best].Impact) {
			best = i
		}
	}
	if best < 0 {
		return findings.Example{}, false
	}
	return exs[best], true
}

// MaxWriters bounds a group's writers: the first few say who changes the
// workload's rules, the findings hold the rest.
const MaxWriters = 3

// MaxExamples bounds a group's example rules: a few show the shape, the
// findings hold the rest.
const MaxExamples = 3

// mergeExamples adds the rules of exs not yet in have and keeps the
// MaxExamples worst, earlier findings' first within a level.
func mergeExamples(have, exs []findings.Example) []findings.Example {
	n := len(have)
	for _, ex := range exs {
		if !slices.ContainsFunc(have, func(h findings.Example) bool {
			return h.Family == ex.Family && h.Table == ex.Table && h.Rule == ex.Rule
		}) {
			have = append(have, ex)
		}
	}
	if len(have) == n {
		// Nothing new: have is in order already.
		return have
	}
	have = findings.BreakingFirst(have)
	return have[:min(len(have), MaxExamples)]
}

// sortedSet sorts l and drops its repeats.
func sortedSet(l []string) []string {
	sort.Strings(l)
	return slices.Compact(l)
}

func add(list *[]string, seen map[string]bool, s string) {
	if s != "" && !seen[s] {
		seen[s] = true
		*list = append(*list, s)
	}
}

// Fail-on modes.
const (
	FailNever      = "never"
	FailUnexpected = "unexpected"
	FailBreaks     = "breaks"
)

// FailModes lists the modes for --help and validation.
var FailModes = []string{FailNever, FailUnexpected, FailBreaks}

// Judge sets each group's Fails by mode and reports whether any fails.
// Under FailBreaks an unclassified group fails too: an impact not known is
// not known to be safe (a group of commands with no level, NoRules, is
// not unclassified: it holds no rules); so does an unknown group, under either mode (it is
// never expected), one whose look stopped early (Truncated: its worst
// level is a lower bound) and one with rules not classified beside
// classified ones (Unclassified).
func Judge(gs []Group, mode string) bool {
	any := false
	for i := range gs {
		g := &gs[i]
		switch mode {
		case FailUnexpected:
			g.Fails = !g.Expected
		case FailBreaks:
			g.Fails = !g.Expected && (findings.Breaks(g.Worst) || g.Worst == "" && !g.NoRules() || g.Unclassified || g.State == findings.StateUnknown || g.Truncated)
		default:
			g.Fails = false
		}
		any = any || g.Fails
	}
	return any
}

// addCommand adds c to a group's commands: distinct, at most MaxWriters,
// a failed one taking the place of the last that did not fail.
func addCommand(cs *[]string, c string) {
	if c == "" || slices.Contains(*cs, c) {
		return
	}
	if len(*cs) < MaxWriters {
		*cs = append(*cs, c)
		return
	}
	if !wording.FailedLine(c) {
		return
	}
	for i := len(*cs) - 1; i >= 0; i-- {
		if !wording.FailedLine((*cs)[i]) {
			(*cs)[i] = c
			return
		}
	}
}

// commandOnly tells whether the item is a command's own finding of the
// exec watch, counting no rules.
func commandOnly(it Item) bool {
	return it.Command != "" && it.Impact == (findings.Impact{}) && !it.Looked
}
