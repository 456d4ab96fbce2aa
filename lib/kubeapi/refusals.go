package kubeapi

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Kinds of object a namespace refuses, in logs, /healthz and the metric.
const (
	KindEvent  = "event"
	KindReport = "report"
)

// maxRefusals bounds the namespaces Refusals remembers: namespaces are the
// cluster's, but a cluster may have thousands.
const maxRefusals = 256

// Refusals remembers, per kind of object, namespace and reason, the last
// refusal (Refusal) until a later write of that kind in that namespace
// gets through: so each is logged once, and /healthz can say which
// namespaces refuse what.
type Refusals struct {
	mu      sync.Mutex
	last    map[refusalKey]string
	counter *prometheus.CounterVec
}

// NewRefusals gives an empty Refusals with its metric.
func NewRefusals() *Refusals {
	return &Refusals{counter: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "iptables_alerter_forward_refused_total",
		Help: "Events and Reports the API server refused for good in their namespace, by kind (event, report) and reason (quota: a ResourceQuota; admission: a webhook or policy; invalid: 422; forbidden: a 403 RBAC does not confirm; other); the finding's line moved on.",
	}, []string{"kind", "reason"})}
}

// Collector is the refusals' metric.
func (r *Refusals) Collector() prometheus.Collector { return r.counter }

// Refused records a refusal of one object (why, see Refusal): counted,
// remembered for /healthz, and logged at error level once per kind,
// namespace and reason (debug after), so one namespace's quota or policy
// neither holds the node's line nor floods the journal.
func (r *Refusals) Refused(entry *logrus.Entry, kind, namespace string, why error) {
	reason := Refusal(why)
	r.counter.WithLabelValues(kind, reason).Inc()
	entry = entry.WithError(why).WithFields(logrus.Fields{"kind": kind, "namespace": namespace, "reason": reason})
	if r.Note(kind, namespace, reason, why) {
		entry.Error(kind + " refused by the API server in this namespace, finding's " + kind + " skipped (said once per namespace and reason; /healthz and iptables_alerter_forward_refused_total count the rest)")
		return
	}
	entry.Debug(kind + " refused by the API server, finding's " + kind + " skipped")
}

type refusalKey struct{ kind, namespace, reason string }

// Note records a refusal; true the first time for its kind, namespace
// and reason since they last got through (log it then, debug after).
func (r *Refusals) Note(kind, namespace, reason string, err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[refusalKey]string{}
	}
	k := refusalKey{kind, namespace, reason}
	_, seen := r.last[k]
	if !seen && len(r.last) >= maxRefusals {
		return false
	}
	r.last[k] = err.Error()
	return !seen
}

// Clear forgets the refusals of kind in namespace: a write got through.
func (r *Refusals) Clear(kind, namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.last {
		if k.kind == kind && k.namespace == namespace {
			delete(r.last, k)
		}
	}
}

// Degraded says which namespaces refuse what, for /healthz; empty when
// none does.
func (r *Refusals) Degraded() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.last) == 0 {
		return ""
	}
	var parts []string
	for k := range r.last {
		parts = append(parts, fmt.Sprintf("%s refused in namespace %s (%s)", k.kind, k.namespace, k.reason))
	}
	sort.Strings(parts)
	const shown = 5
	more := ""
	if len(parts) > shown {
		more = fmt.Sprintf(" and %d more", len(parts)-shown)
		parts = parts[:shown]
	}
	return strings.Join(parts, "; ") + more
}
