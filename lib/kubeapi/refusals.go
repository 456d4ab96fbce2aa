package kubeapi

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

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

// forgetAfter is how long a refusal, or a failing webhook's clock, is
// kept without being seen again: nothing clears a deleted namespace's,
// and a webhook outage seen a day ago says nothing of the next one.
const forgetAfter = 24 * time.Hour

// Refusals remembers, per kind of object, namespace and reason, the last
// refusal (Refusal) until a later write of that kind in that namespace
// gets through, or none is seen there for forgetAfter: so each is logged
// once, and /healthz can say which namespaces refuse what.
type Refusals struct {
	// Hold bounds how long the writes of one kind in one namespace wait
	// on an admission webhook that cannot be called (Outlasted); 0 waits
	// for ever. NewRefusals sets DefaultHold.
	Hold time.Duration

	mu sync.Mutex
	// last holds when each refusal was last seen.
	last map[refusalKey]time.Time
	// failing holds, per kind and namespace (no reason), the clock of a
	// webhook that cannot be called (Outlasted).
	failing map[refusalKey]failure
	now     func() time.Time
	counter *prometheus.CounterVec
}

// failure is a webhook's clock in one namespace for one kind: its first
// and last failure, and whether it outlasted the hold.
type failure struct {
	since, last time.Time
	out         bool
	// hook is the webhook's name, from the API server's message.
	hook string
}

// DefaultHold is Refusals.Hold unless set: long enough for a webhook's
// rollout or restart, short enough that a namespace's broken webhook
// does not hold the node's findings for hours.
const DefaultHold = 10 * time.Minute

// MinHold is the shortest Hold that can run out for a line held with
// backoff up to maxBackoff and requests of up to timeout: twice the
// longest pause between two tries of a held finding, maxBackoff plus a
// try's calls (a pod GET, owner GETs, the Event, a Report's read and
// write: four at most before the one that fails). A shorter one would
// start again at every try (Outlasted) and never run out.
func MinHold(maxBackoff, timeout time.Duration) time.Duration {
	return 2 * (maxBackoff + 4*timeout)
}

// NewRefusals gives an empty Refusals with its metric.
func NewRefusals() *Refusals {
	return &Refusals{Hold: DefaultHold, now: time.Now, counter: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "iptables_alerter_forward_refused_total",
		Help: "Events and Reports the API server refused for good in their namespace, by kind (event, report) and reason (quota: a ResourceQuota; admission: a webhook or policy; invalid: 422; forbidden: a 403 RBAC does not confirm; webhook: a webhook that cannot be called, failing for longer than --webhook-hold; other); the finding's line moved on.",
	}, []string{"kind", "reason"})}
}

// Outlasted tells whether err, an admission webhook that cannot be called
// (WebhookFailed), has failed the writes of kind in namespace for Hold or
// longer: then it is that namespace's refusal (RefusedWebhook), and the
// node's later findings go on instead of waiting for it. The first
// failure starts the clock. Once outlasted, the namespace's next writes
// of that kind are tried once each, until one passes (Clear) or none
// fails there for forgetAfter; before, a pause in the failures longer
// than Hold (a held line retries at least every --max-backoff) starts it
// again: a new outage gets its own hold. One kind's outlasted clock
// outlasts the other's in the same namespace, of the same webhook, at
// its first failure: a webhook on Events and Reports holds a finding
// once, not twice. False, so the write is retried and nothing is lost,
// for any other error, with Hold 0 and on a nil Refusals. Past
// maxRefusals clocks, a new one takes the place of the one seen longest
// ago.
func (r *Refusals) Outlasted(kind, namespace string, err error) bool {
	if r == nil || r.Hold <= 0 || !WebhookFailed(err) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	k := refusalKey{kind: kind, namespace: namespace}
	f, ok := r.failing[k]
	if !ok && !r.room(now, func() int { return len(r.failing) }) {
		r.forgetOldest()
	}
	if !ok || now.Sub(f.last) >= forgetAfter || !f.out && now.Sub(f.last) > r.Hold {
		f = failure{since: now}
	}
	f.last = now
	if name := webhookName(err); f.hook == "" {
		// The first name stays: a webhook as slow as the client's
		// timeout fails with its name or times out without one.
		f.hook = name
	}
	f.out = f.out || now.Sub(f.since) >= r.Hold || r.outBeside(k, f.hook, now)
	if r.failing == nil {
		r.failing = map[refusalKey]failure{}
	}
	r.failing[k] = f
	return f.out
}

// outBeside tells whether another kind's clock in k's namespace, of the
// same webhook, has outlasted its hold and is still current. A write that
// timed out (HeldUp) names no webhook, and ties to none: each kind then
// waits its own hold, as a timeout of one kind says nothing of the
// other's. Callers hold mu.
func (r *Refusals) outBeside(k refusalKey, hook string, now time.Time) bool {
	if hook == "" {
		return false
	}
	for o, f := range r.failing {
		if o.namespace == k.namespace && o.kind != k.kind && f.out && f.hook == hook && now.Sub(f.last) < forgetAfter {
			return true
		}
	}
	return false
}

// webhookName is the webhook a WebhookFailed error names ("failed calling
// webhook \"NAME\""), "" when it names none.
func webhookName(err error) string {
	_, rest, ok := strings.Cut(err.Error(), `failed calling webhook "`)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, `"`)
	return name
}

// room tells whether the table size measures may take one more entry,
// forgetting what was not seen for forgetAfter when it is full. Callers
// hold mu.
func (r *Refusals) room(now time.Time, size func() int) bool {
	if size() < maxRefusals {
		return true
	}
	for k, at := range r.last {
		if now.Sub(at) >= forgetAfter {
			delete(r.last, k)
		}
	}
	for k, f := range r.failing {
		if now.Sub(f.last) >= forgetAfter {
			delete(r.failing, k)
		}
	}
	return size() < maxRefusals
}

// forgetOldest makes room for a webhook clock by forgetting the one seen
// longest ago. Turning the new clock away would hold its namespace's
// writes until some clock is a day old, far past Hold, and short-lived
// CI namespaces or a flood of namespaces fill the table long before. The
// oldest is the cheapest to lose: a held line's clock is seen at every
// try, at most --max-backoff apart, and a forgotten one costs its
// namespace at most one more Hold. Callers hold mu.
func (r *Refusals) forgetOldest() {
	var oldest refusalKey
	var at time.Time
	for k, f := range r.failing {
		if at.IsZero() || f.last.Before(at) {
			oldest, at = k, f.last
		}
	}
	delete(r.failing, oldest)
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
	if r.note(kind, namespace, reason) {
		entry.Error(kind + " refused by the API server in this namespace, finding's " + kind + " skipped (said once per namespace and reason; /healthz and iptables_alerter_forward_refused_total count the rest)")
		return
	}
	entry.Debug(kind + " refused by the API server, finding's " + kind + " skipped")
}

type refusalKey struct{ kind, namespace, reason string }

// note records a refusal; true the first time for its kind, namespace
// and reason since they last got through or were last seen forgetAfter
// ago (log it then, debug after).
func (r *Refusals) note(kind, namespace, reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if r.last == nil {
		r.last = map[refusalKey]time.Time{}
	}
	k := refusalKey{kind, namespace, reason}
	at, seen := r.last[k]
	seen = seen && now.Sub(at) < forgetAfter
	if !seen && !r.room(now, func() int { return len(r.last) }) {
		return false
	}
	r.last[k] = now
	return !seen
}

// Clear forgets the refusals of kind in namespace, and stops the clock
// of a webhook failing there: a write got through.
func (r *Refusals) Clear(kind, namespace string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failing, refusalKey{kind: kind, namespace: namespace})
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
	now := r.now()
	for k, at := range r.last {
		if now.Sub(at) >= forgetAfter {
			continue
		}
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
