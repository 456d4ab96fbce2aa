package report

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
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
}

// ClusterSource is one way to read the findings a cluster holds.
type ClusterSource struct {
	// Name is what Origin.From says.
	Name string
	// Read returns the findings; an error wrapping ErrNoSource means the
	// cluster does not hold this source (not served, none written) and
	// the next one is tried.
	Read func(ctx context.Context, c Cluster, sk *Skipped) ([]Item, error)
}

// ErrNoSource is what a ClusterSource returns when the cluster holds none
// of it.
var ErrNoSource = errors.New("source not in the cluster")

// ClusterSources are read in order, the first the cluster holds wins:
// Reports stay until deleted, where the API server keeps Events an hour by
// default, so Events are the fallback for a cluster without Reports (no
// CRD, or none of ours).
var ClusterSources = []ClusterSource{
	{Name: "reports", Read: ClusterReports},
	{Name: "events", Read: func(ctx context.Context, c Cluster, sk *Skipped) ([]Item, error) {
		return ClusterEvents(ctx, c.Client, c.Namespace, sk)
	}},
}

// ReadCluster reads the first of sources the cluster holds and says which.
func ReadCluster(ctx context.Context, c Cluster, sources []ClusterSource, sk *Skipped) ([]Item, string, error) {
	for _, s := range sources {
		items, err := s.Read(ctx, c, sk)
		if errors.Is(err, ErrNoSource) {
			continue
		}
		return items, s.Name, err
	}
	return nil, "", errors.New("read cluster: none of its sources holds findings")
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
