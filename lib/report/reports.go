package report

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// maxCut bounds the count one cut note adds: a Report keeps results of
// pods of one workload, never more than a cluster's pods.
const maxCut = 1 << 20

// reportsPage is how many Reports one list call asks for. client-go holds
// a page's whole body and its decoded objects at once, and a Report of
// MaxResults results is 200-600 KiB: 500 a page made 100 MB bodies and a
// 650 MB peak over 1,000 full Reports (tests/bench BenchmarkReports).
const reportsPage = 50

// ClusterReports lists the cluster's Reports of ours (lib/openreports) in
// namespace (all when empty), page by page, and gives an Item per result
// of ours. It returns ErrNoSource when the API does not serve Reports (no
// CRD: discovery, or a list's 404) or holds none of ours, so the Events
// are read instead; a list refused is a ForbiddenError, never a quiet
// fallback to Events an hour old (SourceEvents reads them on request).
//
// Anyone allowed to create Reports in a namespace can write one with our
// labels: the namespace is the Report's (never a result's subject's), only
// results whose source is ours count, and every value goes through valid.
func ClusterReports(ctx context.Context, c Cluster, sk *Skipped) ([]Item, error) {
	rc, err := versioned.NewForConfig(c.Config)
	if err != nil {
		return nil, fmt.Errorf("make reports client: %w", err)
	}
	// Discovery first: every authenticated user may ask it, where a
	// namespace's Role that lists Events only gets 403 for a resource not
	// served, and such a reader still gets the Events.
	served, err := openreports.Available(ctx, rc)
	if err != nil {
		return nil, fmt.Errorf("list reports: %w", err)
	}
	if !served {
		return nil, fmt.Errorf("list reports: not served: %w", ErrNoSource)
	}
	var (
		items []Item
		found bool
	)
	opts := metav1.ListOptions{LabelSelector: openreports.Selector(""), Limit: reportsPage}
	for {
		next, err := listReports(ctx, rc, c.Namespace, opts, func(r *leanReport) {
			found = true
			same := map[string]string{}
			var prev Item
			for _, x := range r.Results {
				share(x.Properties, same)
				if it, ok := resultItem(r.Metadata.Namespace, x, sk); ok {
					it = valid(it, sk)
					// Equal lists shared too: nothing changes an
					// Item's lists once read.
					if slices.Equal(it.Examples, prev.Examples) {
						it.Examples = prev.Examples
					}
					if slices.Equal(it.Vendors, prev.Vendors) {
						it.Vendors = prev.Vendors
					}
					items = append(items, it)
					prev = it
				}
			}
		})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("list reports: %w", ErrNoSource)
		}
		if apierrors.IsForbidden(err) {
			return nil, &ForbiddenError{Verb: "list", Resource: ResourceReports, Namespace: c.Namespace, Err: err}
		}
		if err != nil {
			return nil, fmt.Errorf("list reports: %w", err)
		}
		if next == "" {
			break
		}
		opts.Continue = next
	}
	if !found {
		return nil, fmt.Errorf("list reports: %w", errNoneOfOurs)
	}
	return items, nil
}

// shared are the properties the pods of one workload mostly have alike.
var shared = []string{openreports.PropOwner, openreports.PropNodes, openreports.PropRules, openreports.PropVendor, openreports.PropHint, openreports.PropDoc,
	openreports.PropExample + "1", openreports.PropExample + "2", openreports.PropExample + "3"}

// share makes the shared properties of a Report's results that are equal
// one string, same holding the first of each: the Items keep them, and
// 100,000 results each with its own copies held 50 MB more.
func share(p, same map[string]string) {
	for _, k := range shared {
		v, ok := p[k]
		if !ok {
			continue
		}
		if s, ok := same[v]; ok {
			p[k] = s
		} else {
			same[v] = v
		}
	}
}

// resultItem reads one result of a Report in namespace; false for a result
// that is not ours or not about a pod (the cut note is counted in sk).
func resultItem(namespace string, x leanResult, sk *Skipped) (Item, bool) {
	if x.Source != openreports.Source {
		return Item{}, false
	}
	if x.Rule == openreports.CutRule {
		n, err := strconv.Atoi(x.Properties["cut"])
		if err != nil || n <= 0 || n > maxCut {
			n = 1
		}
		sk.Cut += n
		return Item{}, false
	}
	pod, ok := x.podSubject()
	if !ok {
		sk.Malformed++
		return Item{}, false
	}
	p := x.Properties
	it := Item{Namespace: namespace, Pod: pod.Name, PodUID: string(pod.UID), Node: p[openreports.PropNodes],
		Owner: owner.Bare(pod.Name), Source: "reports", State: findings.StatePresent, Time: openreports.Seen(openreportsv1alpha1.ReportResult{Properties: p}),
		Truncated: p[openreports.PropTruncated] == "true", MixedBackends: p[openreports.PropMixedBackends] == "true"}
	if m := p[openreports.PropModules]; m != "" {
		// Judged already: read back as the xt level's, which Judged
		// keeps whole; valid drops what is not a module name.
		it.Modules.Xt = strings.Split(m, ",")
	}
	if it.PodUID == "" {
		it.PodUID = p[openreports.PropPodUID]
	}
	if kind, name, ok := strings.Cut(p[openreports.PropOwner], "/"); ok {
		it.Owner = owner.Owner{Kind: kind, Name: name}
	}
	switch x.Rule {
	case openreports.RuleUnknown:
		it.State, it.Error = findings.StateUnknown, p[openreports.PropError]
	case openreports.RuleUnclassified:
	default:
		// Not a level: valid refuses it and counts it.
		it.Worst = x.Rule
	}
	if x.Result == "error" {
		it.State, it.Worst, it.Error = findings.StateUnknown, "", p[openreports.PropError]
	}
	it.Impact = impactOf(p[openreports.PropRules])
	it.Writer = p[openreports.PropWriter]
	if names := p[openreports.PropVendor]; names != "" {
		for i, n := range strings.Split(names, ",") {
			v := findings.Vendor{Name: n}
			if i == 0 {
				// valid drops a doc that is not an http(s) link.
				v.Hint, v.Doc = p[openreports.PropHint], p[openreports.PropDoc]
			}
			it.Vendors = append(it.Vendors, v)
		}
	}
	for i := 1; i <= openreports.MaxExamples; i++ {
		if line, ok := p[openreports.PropExample+strconv.Itoa(i)]; ok {
			it.Examples = append(it.Examples, exampleOf(line))
		}
	}
	return it, true
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
