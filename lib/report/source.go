package report

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Origin says what a report was made from: the header line of every
// format (a field in JSON, properties in JUnit). A zero Origin prints no
// header.
type Origin struct {
	// Cluster is the API server's URL and Context the kubeconfig context
	// (empty in a pod): the cluster read, for Events, Reports or owners.
	Cluster string `json:"cluster,omitempty"`
	Context string `json:"context,omitempty"`
	// Namespace is the --namespace filter; empty for all.
	Namespace string `json:"namespace,omitempty"`
	// From names the inputs in the order read: "files", "events-file",
	// "reports" or "events" (the cluster's).
	From []string  `json:"from"`
	Time time.Time `json:"time"`
}

// Line is the header line, plain text for the writers to escape: the
// kubeconfig is the user's, but a pod's service account host is the
// cluster's.
func (o Origin) Line() string {
	var parts []string
	switch {
	case o.Cluster != "" && o.Context != "":
		parts = append(parts, fmt.Sprintf("cluster %s (context %s)", o.Cluster, o.Context))
	case o.Cluster != "":
		parts = append(parts, "cluster "+o.Cluster)
	}
	if o.Namespace != "" {
		parts = append(parts, "namespace "+o.Namespace)
	}
	var b strings.Builder
	b.WriteString("Report")
	if len(parts) > 0 {
		b.WriteString(" of " + strings.Join(parts, ", ") + ",")
	}
	fmt.Fprintf(&b, " at %s, from %s.", o.Time.UTC().Format(time.RFC3339), strings.Join(o.From, ", "))
	return safetext.Display(b.String())
}

// Cluster is what a cluster source reads with.
type Cluster struct {
	Client kubernetes.Interface
	// Config makes clients of other API groups (the Reports').
	Config *rest.Config
	// Namespace limits the listing; empty for all namespaces.
	Namespace string
	// Context is the kubeconfig context used, empty in a pod (Origin).
	Context string
	// ContextNamespace is the namespace that context sets, "" for none:
	// what kubectl would read when no namespace is named (Read).
	ContextNamespace string
}

// Connect makes the Cluster read with rc (a kubeconfig's, or in a pod the
// service account's); kubeContext is the kubeconfig context it came from,
// "" in a pod. Every client made from its Config refuses an answer over
// MaxAnswer bytes.
func Connect(rc *rest.Config, kubeContext, namespace string) (Cluster, error) {
	rc = rest.CopyConfig(rc)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return capAnswers(rt, MaxAnswer) })
	// Pages one after the other, as kubectl reads them (its 50 a
	// second): client-go's default of 5 held every page past the tenth
	// for 200 ms, 8 s of the bench's 5,000 Events at 100 a page.
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	// The built-in kinds (Events, above all: every namespace's are read)
	// in protobuf, which decodes in a fraction of JSON's time and
	// garbage; the Reports' client (Config) stays on JSON, all a CRD
	// speaks.
	kc := rest.CopyConfig(rc)
	kc.ContentType, kc.AcceptContentTypes = "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return Cluster{}, fmt.Errorf("make kubernetes client: %w", err)
	}
	return Cluster{Client: client, Config: rc, Namespace: namespace, Context: kubeContext}, nil
}

// ClusterSource is one way to read the findings a cluster holds.
type ClusterSource struct {
	// Name is what Origin.From says.
	Name string
	// Read hands each finding to add as it is read (present or unknown:
	// never gone); an error wrapping ErrNoSource means the cluster does
	// not hold this source (not served, none written), nothing was
	// handed, and the next one is tried.
	Read func(ctx context.Context, c Cluster, sk *Skipped, add func(Item)) error
	// Also, unless nil, names the other sources Read took items from
	// (after it returned), for Origin.From.
	Also func() []string
}

// ErrNoSource is what a ClusterSource returns when the cluster holds none
// of it.
var ErrNoSource = errors.New("source not in the cluster")

// errNoneOfOurs is ErrNoSource for a cluster that serves Reports but holds
// none of ours: under SourceReports that is a report of nothing, not an
// error.
var errNoneOfOurs = fmt.Errorf("none of ours: %w", ErrNoSource)

// ForbiddenError is a list of ours the API server refused for lack of
// permission: it names what to grant. A report never passes over it to
// another source, since it would then say less than the cluster holds.
type ForbiddenError struct {
	// Verb and Resource ("reports.openreports.io", "events") are what
	// RBAC must allow; Namespace is "" for all namespaces.
	Verb, Resource, Namespace string
	Err                       error
}

func (e *ForbiddenError) Error() string {
	where := "in all namespaces (a ClusterRole bound by a ClusterRoleBinding)"
	if e.Namespace != "" {
		where = fmt.Sprintf("in namespace %q (a Role there is enough)", e.Namespace)
	}
	return fmt.Sprintf("%s %s: forbidden: the credentials need %q on %q %s, as packaging/rbac/report.yaml grants: %v",
		e.Verb, e.Resource, e.Verb, e.Resource, where, e.Err)
}

func (e *ForbiddenError) Unwrap() error { return e.Err }

// IsForbidden reports whether err is, or wraps, a ForbiddenError about
// resource ("" for any), and gives it.
func IsForbidden(err error, resource string) (*ForbiddenError, bool) {
	var fe *ForbiddenError
	if errors.As(err, &fe) && (resource == "" || fe.Resource == resource) {
		return fe, true
	}
	return nil, false
}

// Resources named by ForbiddenError.
const (
	ResourceReports        = "reports.openreports.io"
	ResourceClusterReports = "clusterreports.openreports.io"
	ResourceEvents         = "events"
)

// Sources --source selects from.
const (
	// SourceAuto reads the findings files and saved Events given, else the
	// cluster's Reports by namespace and its Events elsewhere, else its
	// Events alone (SourcesOf).
	SourceAuto = "auto"
	// SourceReports and SourceEvents read only that source of the
	// cluster; SourceFiles only the files given.
	SourceReports = "reports"
	SourceEvents  = "events"
	SourceFiles   = "files"
)

// Sources lists the --source values, for help and validation.
var Sources = []string{SourceAuto, SourceReports, SourceEvents, SourceFiles}

// SourcesOf gives the cluster sources a --source value reads, in order:
// for auto reportsByNamespace then eventsSource, one source for reports
// or events (Reports served but none of ours is then a report of
// nothing), none for files.
func SourcesOf(source string) []ClusterSource {
	switch source {
	case SourceReports:
		return []ClusterSource{{Name: SourceReports, Read: func(ctx context.Context, c Cluster, sk *Skipped, add func(Item)) error {
			// No Event is read: the pods a Report left out are in no
			// input, and a --fail-on gate is blind to them.
			cut := map[string]int{}
			err := clusterReports(ctx, c, sk, add, func(ns string, n int) { cut[ns] += n })
			sk.cutUnseen(cut)
			if err != nil && !errors.Is(err, errNoneOfOurs) {
				return err
			}
			if c.Namespace == "" {
				return nodeReports(ctx, c, sk, add)
			}
			return nil
		}}}
	case SourceEvents:
		return []ClusterSource{eventsSource}
	case SourceFiles:
		return nil
	}
	return []ClusterSource{reportsByNamespace(), eventsSource}
}

// reportsByNamespace is auto's first source: the Reports of every
// namespace that holds one of ours, the nodes' ClusterReports, and the
// Events of every other namespace, of the nodes (a node's Event and its
// ClusterReport are one node's looks, grouped) and of the namespaces
// whose Reports had no room for every pod. Per
// namespace, not for the whole cluster: anyone allowed to create Reports
// in one namespace can write one with our labels, and the whole cluster's
// Events (the only source of a forwarder run without --reports) would
// then give way to it; now only that namespace's do, where writing Reports
// is already that user's to do. Even there, the Event of a pod no Report
// holds is read, and one that says worse than the pod's result: a Report
// refused (a quota, an admission policy, Reports turned off by RBAC a
// while, on one node) leaves its pods in Events alone, or its result
// behind them, and a decoy Report hid the namespace's other pods. An
// Event can only add a pod or make one worse, never better than its
// Report says. A pod whose usage went (its result removed) shows from its
// last Event while the API server keeps it (an hour by default). A
// cluster with no Report of ours (or no Report CRD) gives ErrNoSource, so
// the Events alone are read next.
func reportsByNamespace() ClusterSource {
	var fromEvents bool
	return ClusterSource{Name: SourceReports,
		Read: func(ctx context.Context, c Cluster, sk *Skipped, add func(Item)) error {
			held, cut := map[string]bool{}, map[string]bool{}
			// pods are the Reports' pods, each with the rank of the
			// readiness its result says, by a hash of its namespace and
			// UID: a map of 100,000 pods' strings weighed 30 MB on the
			// report's peak. The seed is the process's own, so a UID
			// written into a Report cannot be made to collide with
			// another namespace's pod.
			seed := maphash.MakeSeed()
			podKey := func(it Item) uint64 {
				var h maphash.Hash
				h.SetSeed(seed)
				h.WriteString(it.Namespace)
				h.WriteByte(0)
				h.WriteString(it.PodUID)
				return h.Sum64()
			}
			pods := map[uint64]int8{}
			fromReport := func(it Item) {
				k := podKey(it)
				r := int8(rank(itemReadiness(it)))
				if old, ok := pods[k]; !ok || r < old {
					pods[k] = r
				}
				add(it)
			}
			err := clusterReports(ctx, c, sk, fromReport, func(ns string, n int) {
				held[ns] = true
				if n > 0 {
					cut[ns] = true
				}
			})
			if err != nil && !errors.Is(err, errNoneOfOurs) {
				return err
			}
			// The nodes' own results (node mode), in ClusterReports: a
			// node's Event is kept an hour at most. None of ours in
			// either: the Events alone, next.
			nodes := 0
			if c.Namespace == "" {
				if err := nodeReports(ctx, c, sk, func(it Item) { nodes++; add(it) }); err != nil {
					return err
				}
			}
			if err != nil && nodes == 0 {
				return err
			}
			// A Report keeps at most MaxResults-1 pods: the Events of a
			// namespace whose Report left some out are all read, and
			// give those pods while the API server keeps them (a pod in
			// both is one pod, grouping: its newest complete look's
			// counts, but a cut or unknown look among them stands while
			// its Event lives, since either could be forged).
			return eachClusterEvent(ctx, c.Client, c.Namespace, sk, func(it Item) {
				// A node's item has no namespace.
				// Left out: one of a pod a Report holds, saying no worse.
				if r, ok := pods[podKey(it)]; ok && held[it.Namespace] && !cut[it.Namespace] &&
					int8(rank(itemReadiness(it))) >= r {
					return
				}
				fromEvents = true
				add(it)
			})
		},
		Also: func() []string {
			if fromEvents {
				return []string{SourceEvents}
			}
			return nil
		},
	}
}

// itemReadiness is what one item says of its pod: unknown for a look that
// could not finish or saw part (a lower bound), ready for a command's own
// without a level (a failed command: no rules, as groupReadiness has it),
// else its level's.
func itemReadiness(it Item) string {
	if it.State == findings.StatePresent && it.Worst == "" && commandOnly(it) {
		return findings.ReadinessReady
	}
	r := findings.Readiness(it.Worst)
	if it.State == findings.StateUnknown || it.Truncated {
		return findings.WorseReadiness(r, findings.ReadinessUnknown)
	}
	return r
}

// eventsSource is the cluster's Events. Reports stay until deleted, where
// the API server keeps Events an hour by default: auto reads the Reports
// first, by namespace (reportsByNamespace), and the Events alone for a
// cluster without Reports (no CRD, or none of ours).
var eventsSource = ClusterSource{Name: SourceEvents, Read: func(ctx context.Context, c Cluster, sk *Skipped, add func(Item)) error {
	items, err := ClusterEvents(ctx, c.Client, c.Namespace, sk)
	for _, it := range items {
		add(it)
	}
	return err
}}

// ReadCluster reads the first of sources the cluster holds, handing its
// findings to add, and says which (with the others it took items from).
func ReadCluster(ctx context.Context, c Cluster, sources []ClusterSource, sk *Skipped, add func(Item)) ([]string, error) {
	last := errors.New("no source to read")
	for _, s := range sources {
		err := s.Read(ctx, c, sk, add)
		if errors.Is(err, ErrNoSource) {
			last = err
			continue
		}
		from := []string{s.Name}
		if s.Also != nil {
			from = append(from, s.Also()...)
		}
		return from, err
	}
	return nil, fmt.Errorf("read cluster: none of its sources holds findings: %w", last)
}

// CheckNamespace refuses a --namespace value that is not a namespace name.
func CheckNamespace(ns string) error {
	if msgs := validation.IsDNS1123Label(ns); ns != "" && len(msgs) > 0 {
		return fmt.Errorf("check namespace %q: %s", ns, strings.Join(msgs, "; "))
	}
	return nil
}

// InNamespace keeps the items of namespace ns; all when ns is empty. Files
// and saved Events hold every namespace; the cluster's are listed in ns.
func InNamespace(items []Item, ns string) []Item {
	if ns == "" {
		return items
	}
	out := items[:0:0]
	for _, it := range items {
		if it.Namespace == ns {
			out = append(out, it)
		}
	}
	return out
}
