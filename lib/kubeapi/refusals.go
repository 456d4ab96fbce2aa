package kubeapi

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// maxRefusals bounds the namespaces Refusals remembers: namespaces are the
// cluster's, but a cluster may have thousands.
const maxRefusals = 256

// Refusals remembers, per kind of object, namespace and reason, the last
// refusal (Refusal) until a later write of that kind in that namespace
// gets through: so each is logged once, and /healthz can say which
// namespaces refuse what.
type Refusals struct {
	mu   sync.Mutex
	last map[refusalKey]string
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
