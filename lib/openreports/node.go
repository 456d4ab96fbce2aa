package openreports

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
)

// A record of subject node (the agent's node mode) is about the node's own
// network namespace: it goes into a cluster-scoped ClusterReport per node,
// which outlives the Node Event's TTL the way a pod's Report outlives its
// Events. The ClusterReport holds one result, the node's latest record;
// a gone record deletes it. Like the Reports, only that node's forwarder
// writes it (labelled NodeLabel). It has no owner reference: the forwarder
// does not read Nodes, and a Node's name comes back with a reinstalled
// machine.

// ClusterVerbs are the calls the Writer makes on clusterreports (the
// openreports.io rule of packaging/rbac).
var ClusterVerbs = []string{"get", "create", "update", "delete"}

// NodeReportName is the ClusterReport of node's own network namespace.
func NodeReportName(node string) string {
	return kubeapi.ObjectName("iptables-node-"+node, "node-report", node)
}

// writeNode puts a node record into this node's ClusterReport, by its
// state: present with usage or unknown, the one result replaced (its first
// sighting kept); gone, the ClusterReport deleted.
func (w *Writer) writeNode(ctx context.Context, rec findings.Record) (Result, error) {
	res := Result{Name: NodeReportName(w.node)}
	var x *openreportsv1alpha1.ReportResult
	switch rec.KnownState() {
	case findings.StateGone:
		res.Outcome = Removed
	case findings.StatePresent:
		if !rec.HasUsage() && !rec.CommandOnly() {
			return Result{Outcome: NoPod, Why: errors.New("record holds no iptables usage")}, nil
		}
		fallthrough
	default:
		rec.Vendors = catalog.NodeWords(rec.Vendors)
		r := common(rec, w.node, time.Time{}, wording.NodeNote(rec))
		r.Subjects = []corev1.ObjectReference{{APIVersion: "v1", Kind: "Node", Name: w.node}}
		x = &r
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	api := w.reports.OpenreportsV1alpha1().ClusterReports()
	err := upsert(ctx, api, res.Name, w.node,
		func(bool) (*openreportsv1alpha1.ClusterReport, bool, error) {
			// One object a node, written by its forwarder alone: read
			// each time, no copy kept.
			r, err := api.Get(ctx, res.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return &openreportsv1alpha1.ClusterReport{ObjectMeta: metav1.ObjectMeta{Name: res.Name}}, true, nil
			case err != nil:
				return nil, false, fmt.Errorf("get report %q: %w", res.Name, err)
			}
			return r, false, nil
		}, nil,
		func(r *openreportsv1alpha1.ClusterReport) bool {
			if x == nil {
				return true
			}
			// A copy each try: a conflict calls this again.
			y := *x
			y.Properties = maps.Clone(x.Properties)
			var old *openreportsv1alpha1.ReportResult
			if len(r.Results) > 0 {
				old = &r.Results[0]
				// The first sighting of the usage the report held.
				if first := firstSeen(*old); !first.IsZero() && first.Before(Seen(y)) {
					y.Properties[PropFirstSeen] = first.Format(time.RFC3339)
				}
				y = after(*old, y, rec)
			}
			// Without one, Policy Reporter's key holds the message, whose
			// counts change: a new result, and a notification, at each.
			y.Properties[PropResultID] = resultKey(old, y.Rule, w.node, r.Name)
			r.Source = Source
			r.Scope = &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: w.node}
			r.Results = []openreportsv1alpha1.ReportResult{y}
			r.Summary = summary(r.Results)
			return false
		})
	return w.finish(res, err)
}
