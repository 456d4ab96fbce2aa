package report

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// maxCut bounds the count one cut note adds: a Report keeps results of
// pods of one workload, never more than a cluster's pods.
const maxCut = 1 << 20

// reportsPage is how many Reports one list call asks for. Each page is
// read as it streams in (pageReader), so its size bounds no memory of
// ours; it bounds the API server's, which builds a page whole before
// sending it (500 full Reports a page made 100 MB answers).
const reportsPage = 50

// overHTTP1 is cfg speaking HTTP/1.1 only. The Reports' pages are the
// bulk of what a report reads (some 300 MB of JSON for 100,000 results,
// 30 MB gzipped), one page after the other: over HTTP/2 every frame of
// them went through the transport's reading goroutine to the report's,
// with a flow-control window update written back, and the report spent
// about a fifth more CPU than over HTTP/1.1, where it reads the
// connection itself (BenchmarkReports, docs/performance.md).
func overHTTP1(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.NextProtos = []string{"http/1.1"}
	return cfg
}

// clusterReports lists the cluster's Reports of ours (lib/openreports) in
// namespace (all when empty), page by page, and hands add an Item per
// result of ours as each Report is read; held is told the namespace of
// each Report of ours read, whatever its results, and how many results its
// cut note counts (results it had no room for; 0 for none). It returns
// ErrNoSource when the API does not serve Reports (no CRD: discovery, or a
// first list's 404) or holds none of ours, so the Events are read instead;
// a list refused is a ForbiddenError, never a quiet fallback to Events an
// hour old (SourceEvents reads them on request).
//
// Anyone allowed to create Reports in a namespace can write one with our
// labels: the namespace is the Report's (never a result's subject's), only
// results whose source is ours count, and every value goes through valid.
func clusterReports(ctx context.Context, c Cluster, sk *Skipped, add func(Item), held func(namespace string, cut int)) error {
	rc, err := versioned.NewForConfig(overHTTP1(c.Config))
	if err != nil {
		return fmt.Errorf("make reports client: %w", err)
	}
	// Discovery first: every authenticated user may ask it, where a
	// namespace's Role that lists Events only gets 403 for a resource not
	// served, and such a reader still gets the Events.
	served, err := openreports.Available(ctx, rc)
	if err != nil {
		return fmt.Errorf("list reports: %w", err)
	}
	if !served {
		return fmt.Errorf("list reports: not served: %w", ErrNoSource)
	}
	found := false
	p, cache := newPageReader(), &resultCache{}
	opts := metav1.ListOptions{LabelSelector: openreports.Selector(""), Limit: reportsPage}
	for {
		next, err := p.listReports(ctx, rc, "reports", c.Namespace, opts, func(namespace string, results []leanResult) {
			found = true
			cut := 0
			for i := range results {
				if results[i].Ours && results[i].Rule == openreports.CutRule {
					cut += cutCount(&results[i])
				}
			}
			held(namespace, cut)
			for i := range results {
				if it, ok := cache.item(namespace, &results[i], sk); ok {
					add(it)
				}
			}
		})
		if apierrors.IsNotFound(err) && !found {
			return fmt.Errorf("list reports: %w", ErrNoSource)
		}
		if apierrors.IsForbidden(err) {
			return &ForbiddenError{Verb: "list", Resource: ResourceReports, Namespace: c.Namespace, Err: err}
		}
		if err != nil {
			return fmt.Errorf("list reports: %w", err)
		}
		if next == "" {
			break
		}
		opts.Continue = next
	}
	if !found {
		return fmt.Errorf("list reports: %w", errNoneOfOurs)
	}
	return nil
}

// nodeReports lists the cluster's ClusterReports of ours, the nodes' own
// results (node mode: lib/openreports writes one a node), page by page,
// and hands add an Item per result of a node the cluster still lists:
// they outlive the node's Events, which alone told of a node's own rules
// before, an hour at most, and a removed node's stays until deleted by
// hand (counted in GoneNodes). Not served (no CRD) is none; a list
// refused is a ForbiddenError (a node's result the report cannot read).
// Only a cluster-scoped report makes a node's item: a namespaced one is
// anyone's in its namespace.
func nodeReports(ctx context.Context, c Cluster, sk *Skipped, add func(Item)) error {
	rc, err := versioned.NewForConfig(overHTTP1(c.Config))
	if err != nil {
		return fmt.Errorf("make reports client: %w", err)
	}
	if served, err := openreports.ClusterAvailable(ctx, rc); err != nil || !served {
		return err
	}
	var items []Item
	p := newPageReader()
	opts := metav1.ListOptions{LabelSelector: openreports.Selector(""), Limit: reportsPage}
	for {
		next, err := p.listReports(ctx, rc, "clusterreports", "", opts, func(_ string, results []leanResult) {
			for i := range results {
				if it, ok := nodeResultItem(&results[i], sk); ok {
					items = append(items, valid(it, sk))
				}
			}
		})
		if apierrors.IsForbidden(err) {
			return &ForbiddenError{Verb: "list", Resource: ResourceClusterReports, Err: err}
		}
		if err != nil {
			return fmt.Errorf("list clusterreports: %w", err)
		}
		if next == "" {
			break
		}
		opts.Continue = next
	}
	if len(items) == 0 {
		return nil
	}
	nodes, err := ListNodes(ctx, c.Client)
	if apierrors.IsForbidden(err) {
		return &ForbiddenError{Verb: "list", Resource: "nodes", Err: err}
	}
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	listed := map[string]bool{}
	for _, n := range nodes {
		listed[n.Name] = true
	}
	for _, it := range items {
		if !listed[it.Node] {
			sk.GoneNodes++
			continue
		}
		add(it)
	}
	return nil
}

// ListNodes lists the cluster's nodes, page by page (a big cluster's
// Nodes in one answer outgrew MaxAnswer): for --by node|pool, and the
// nodes the ClusterReports may name.
func ListNodes(ctx context.Context, client kubernetes.Interface) ([]corev1.Node, error) {
	var nodes []corev1.Node
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, l.Items...)
		if l.Continue == "" {
			return nodes, nil
		}
		opts.Continue = l.Continue
	}
}

// nodeResultItem reads one result of a ClusterReport: its node's, read as
// a pod's result is (resultShared), the node its subject.
func nodeResultItem(x *leanResult, sk *Skipped) (Item, bool) {
	it, ok := resultShared("", x, sk)
	if ok {
		it.Node, it.Owner = x.Node.Name, nodeOwner(x.Node.Name)
	}
	return it, ok
}

// resultItem reads one result of a Report in namespace; false for a result
// that is not ours or not about a pod (the cut note is counted in sk).
func resultItem(namespace string, x *leanResult, sk *Skipped) (Item, bool) {
	it, ok := resultShared(namespace, x, sk)
	if ok {
		it = withPod(it, x)
	}
	return it, ok
}

// withPod gives it the result's pod: its name, its UID, and as the owner
// when the result names none.
func withPod(it Item, x *leanResult) Item {
	it.Pod, it.PodUID = x.Pod.Name, x.Pod.UID
	if it.PodUID == "" {
		it.PodUID = x.Props.PodUID
	}
	if !strings.Contains(x.Props.Owner, "/") {
		it.Owner = owner.Bare(it.Pod)
	}
	return it
}

// cutCount is how many results a cut note says its Report left out: 1
// when it says no valid count (a note means at least one).
func cutCount(x *leanResult) int {
	n, err := strconv.Atoi(x.Props.Cut)
	if err != nil || n <= 0 || n > maxCut {
		return 1
	}
	return n
}

// resultShared is resultItem but for what withPod adds.
func resultShared(namespace string, x *leanResult, sk *Skipped) (Item, bool) {
	if !x.Ours {
		return Item{}, false
	}
	p := &x.Props
	if x.Rule == openreports.CutRule {
		sk.Cut += cutCount(x)
		return Item{}, false
	}
	// A Report's subject is a pod; a ClusterReport's (no namespace) a
	// node.
	if namespace != "" && !x.HasPod || namespace == "" && !x.HasNode {
		sk.Malformed++
		return Item{}, false
	}
	it := Item{Namespace: namespace, Node: p.Nodes, Source: "reports", State: findings.StatePresent, Time: p.Seen,
		Truncated: p.Truncated == "true", MixedBackends: p.Mixed == "true", Posted: true}
	if m := p.Modules; m != "" {
		// Judged already: read back as the xt level's, which Judged
		// keeps whole; valid drops what is not a module name.
		it.Modules.Xt = strings.Split(m, ",")
	}
	if kind, name, ok := strings.Cut(p.Owner, "/"); ok {
		it.Owner = owner.Owner{Kind: kind, Name: name}
	}
	// A result of these rules, or a cut one, is a look at the rules even
	// with all its counts 0 and the pod's last command beside them.
	it.Looked = x.Rule == openreports.RuleUnknown || x.Rule == openreports.RuleUnclassified || it.Truncated
	// A cut look that saw native rules alone is written unknown (its rules
	// not seen may be legacy) with its counts: read as the findings file
	// and its Event have it, present, native, truncated, so the pod keeps
	// one row whatever the source.
	cutNative := x.Rule == openreports.RuleUnknown && it.Truncated && p.Rules != ""
	switch {
	case cutNative:
		it.Worst, it.Error = findings.ImpactNative, p.Error
	case x.Rule == openreports.RuleUnknown:
		it.State, it.Error = findings.StateUnknown, p.Error
	case x.Rule == openreports.RuleUnclassified, x.Rule == openreports.RuleFailedCommand:
	default:
		// Not a level: valid refuses it and counts it.
		it.Worst = x.Rule
	}
	if x.Errored && !cutNative {
		it.State, it.Worst, it.Error = findings.StateUnknown, "", p.Error
	}
	it.Impact = impactOf(p.Rules)
	it.Writer, it.Command = p.Writer, p.Command
	if names := p.Vendor; names != "" {
		for i, n := range strings.Split(names, ",") {
			v := findings.Vendor{Name: n}
			if i == 0 {
				// valid drops a doc that is not an http(s) link.
				v.Hint, v.Doc = p.Hint, p.Doc
			}
			it.Vendors = append(it.Vendors, v)
		}
	}
	for i, line := range p.Examples {
		if p.HasExample[i] {
			it.Examples = append(it.Examples, exampleOf(line))
		}
	}
	return it, true
}

// resultCache keeps the checked Item (validShared) each result makes but
// for its pod: the results of one workload's Report differ mostly in their
// pod, and reading and checking each whole took a fifth of the report's
// CPU over 100,000 results.
type resultCache struct {
	m map[resultKey]resultTemplate
	// last is the last key and its template: most results are the
	// previous one's pod's neighbour, and their strings are one copy
	// (pageReader), so comparing them is cheap where hashing is not.
	lastKey resultKey
	last    resultTemplate
	hasLast bool
}

// resultKey is what a result says beside its pod.
type resultKey struct {
	namespace, rule string
	errored         bool
	props           leanProps
}

type resultTemplate struct {
	it      Item
	ownerOK bool
	// invalid is what validShared counted in Skipped.Invalid.
	invalid int
}

// maxTemplates bounds the cache: a hostile Report's results each unlike
// the others would otherwise each be kept.
const maxTemplates = 4096

// item is valid(resultItem(namespace, x)), the part its pod does not
// change made once.
func (c *resultCache) item(namespace string, x *leanResult, sk *Skipped) (Item, bool) {
	if !x.Ours || !x.HasPod || x.Rule == openreports.CutRule {
		it, ok := resultItem(namespace, x, sk)
		if ok {
			it = valid(it, sk)
		}
		return it, ok
	}
	k := resultKey{namespace: namespace, rule: x.Rule, errored: x.Errored, props: x.Props}
	k.props.PodUID = ""
	t, ok := c.last, c.hasLast && c.lastKey == k
	if !ok {
		t, ok = c.m[k]
	}
	if !ok {
		var tsk Skipped
		it, _ := resultShared(namespace, x, &tsk)
		t.it, t.ownerOK = validShared(it, &tsk)
		t.invalid = tsk.Invalid
		if c.m == nil || len(c.m) >= maxTemplates {
			c.m = map[resultKey]resultTemplate{}
		}
		c.m[k] = t
	}
	c.lastKey, c.last, c.hasLast = k, t, true
	sk.Invalid += t.invalid
	return validPod(withPod(t.it, x), t.ownerOK, sk), true
}

// impactOf reads the rules property, "legacy=N xt=N native=N total=N";
// anything else counts nothing.
func impactOf(s string) findings.Impact {
	var im findings.Impact
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			continue
		}
		switch k {
		case findings.ImpactLegacy:
			im.Legacy = n
		case findings.ImpactXt:
			im.Xt = n
		case findings.ImpactNative:
			im.Native = n
		}
	}
	return im
}

// exampleOf reads back an example property, wording.ExampleLine's
// "[FAMILY TABLE, LEVEL] RULE" (the bracket optional).
func exampleOf(line string) findings.Example {
	where, rule, ok := strings.Cut(strings.TrimPrefix(line, "["), "] ")
	if !strings.HasPrefix(line, "[") || !ok {
		return findings.Example{Rule: line}
	}
	ex := findings.Example{Rule: rule}
	if i := strings.LastIndex(where, ", "); i >= 0 {
		where, ex.Impact = where[:i], where[i+2:]
	}
	ex.Family, ex.Table, _ = strings.Cut(where, " ")
	return ex
}
