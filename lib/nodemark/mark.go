package nodemark

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
)

// DefaultLabel is the label key the forwarder keeps on its Node.
const DefaultLabel = "iptables-alerter.io/rhel10"

// The label's values, worst first (findings.Readinesses).
const (
	Breaks     = findings.ReadinessBreaks
	Unknown    = findings.ReadinessUnknown
	NeedsExtra = findings.ReadinessNeedsExtra
	Ready      = findings.ReadinessReady
)

// Defaults of the loop: try a failed patch again every minute; drop
// deleted pods every 10 minutes.
const (
	DefaultRetry = time.Minute
	DefaultPrune = 10 * time.Minute
)

// MaxEntries bounds the pods kept (a node runs at most a few hundred);
// beyond it the mildest level's oldest sighting goes (bound).
const MaxEntries = 4096

// maxState bounds the state file read.
const maxState = 4 << 20

// nodeKey is the node's own entry.
const nodeKey = "node"

// Entry is one pod's (or the node's) level.
type Entry struct {
	// Level is a findings impact level, "unknown" or "unclassified", of
	// the rules; "" when only Command is known.
	Level string `json:"level"`
	// Command is the worst level of a pod's commands' own findings (the
	// exec watch: a legacy tool run, a write refused for missing kernel
	// support), kept for the pod's life: no rule shows it (a failed write
	// leaves none), and the exec watch records each command shape once,
	// so a later look at the rules must not take it away. The node's
	// commands count in Level, until its next look.
	Command   string    `json:"command,omitempty"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
	Seen      time.Time `json:"seen"`
}

// state is the state file.
type state struct {
	Entries map[string]Entry `json:"entries"`
}

// MaxLag is how long the forwarder may go without having read every
// finding written (CaughtUp) before the label says unknown: a finding held
// behind an API server or webhook that refuses it may be a pod's usage.
const MaxLag = 5 * time.Minute

// Marker keeps the label of one node.
type Marker struct {
	kube        kubernetes.Interface
	node, label string
	path        string
	log         logrus.FieldLogger
	Retry       time.Duration
	Prune       time.Duration
	// Swept is the agent's word that it looked at every pod
	// (findings.SweptPath of the findings): without a valid one the label
	// is never better than unknown. Empty: not asked for (tests).
	Swept string
	// CaughtUp is the moment up to which every finding was handed to the
	// marker (consumer.Runner's); nil: not asked for.
	CaughtUp func() time.Time

	mu      sync.Mutex
	entries map[string]Entry
	// applied is the value the API last took ("" none yet); warned the
	// last patch error said.
	applied, warned string
	// failed is the value whose patch failed last, "" when none.
	failed string
	// fresh: New found no state file. held: Consume neither saves nor
	// labels (Hold, a replay).
	fresh, held bool
	// appliedAt is when the API last took applied; started when Start
	// ran; vouched when the reading was last found up to the agent's word
	// (look); unseen why the last look could not vouch ("" it could),
	// logged when it changes.
	appliedAt, started, vouched time.Time
	unseen                      string

	patches *prometheus.CounterVec
}

// New gives the marker of node's label, its state kept in path (read
// now: a missing file is an empty state, Fresh; so is a damaged one, said:
// failing would stop the forwarder's Events too, at every start; a file
// that cannot be read is an error).
func New(kube kubernetes.Interface, node, label, path string, log logrus.FieldLogger) (*Marker, error) {
	m := &Marker{kube: kube, node: node, label: label, path: path, log: log, Retry: DefaultRetry, Prune: DefaultPrune,
		entries: map[string]Entry{}, patches: newPatches()}
	data, err := fileio.ReadFile(path, maxState)
	var s state
	switch {
	case errors.Is(err, os.ErrNotExist):
		m.fresh = true
		return m, nil
	case errors.Is(err, fileio.ErrTooLarge):
	case err != nil:
		return nil, fmt.Errorf("read node label state: %w", err)
	default:
		err = json.Unmarshal(data, &s)
	}
	if err != nil {
		log.WithError(err).WithField("state", path).Warn("the node label's state is damaged: reading the findings again before labelling")
		m.fresh = true
		return m, nil
	}
	for k, e := range s.Entries {
		m.entries[k] = e
	}
	return m, nil
}

func newPatches() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "iptables_alerter_forward_node_label_patches_total",
		Help: "Patches of the node's RHEL 10 readiness label (--node-label), by result (ok, error: refused or failed, tried again).",
	}, []string{"result"})
}

// Register adds the marker's metrics to reg; a nil marker (--node-label
// empty) registers them at 0.
func (m *Marker) Register(reg prometheus.Registerer) {
	if m == nil {
		reg.MustRegister(newPatches())
		return
	}
	reg.MustRegister(m.patches)
}

// Mark is the label value of a set of levels: the worst wins.
func Mark(entries map[string]Entry) string {
	mark := Ready
	for _, e := range entries {
		mark = findings.WorseReadiness(mark, readiness(e.level()))
	}
	return mark
}

// level is the entry's level: the worse of its rules' and its commands'.
func (e Entry) level() string {
	return worseOf(e.Level, e.Command)
}

// worseOf is the worse of two levels, "" the mildest (none known).
func worseOf(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "" || worse(a, b):
		return a
	}
	return b
}

// worse reports whether level a makes the label worse than b, or as bad.
func worse(a, b string) bool {
	ra := readiness(a)
	return findings.WorseReadiness(ra, readiness(b)) == ra
}

// Fresh reports whether New found no state file: the findings handled
// before (up to the checkpoint of the consumers it joins) are unknown to
// the marker, so labelling now could say ready of a node whose pods'
// usage it never read (a first start, the label turned on later, a lost
// file). The caller reads the findings again into it, held.
func (m *Marker) Fresh() bool { return m.fresh }

// Hold makes Consume keep the levels without saving or labelling, while
// the findings are read again; Release ends it and saves the state once.
// A replay cut short leaves no state file, so the next start replays.
func (m *Marker) Hold() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = true
}

// Release ends Hold: the state is saved; Start labels.
func (m *Marker) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held, m.fresh = false, false
	m.bound()
	m.save()
}

// Value is the label's value now.
func (m *Marker) Value() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.value(time.Now())
}

// value is the label's value at now: the pods' levels, and unknown while
// the agent's look cannot vouch that they are all there is (look). m.mu
// held.
func (m *Marker) value(now time.Time) string {
	v := Mark(m.entries)
	agent, err := m.look(now)
	// The agent's own readiness counts as a finding would: a line this
	// reader lost must not leave a breaking pod's node ready.
	v = findings.WorseReadiness(v, agent)
	why := ""
	if err != nil {
		v, why = findings.WorseReadiness(v, Unknown), err.Error()
	}
	if why != m.unseen {
		if why != "" {
			m.log.WithError(err).Warn("node label: not everything on the node was seen, so it says unknown at best")
		} else {
			m.log.Info("node label: the agent looked at every pod and every finding was read")
		}
		m.unseen = why
	}
	return v
}

// look tells why the label cannot say that the pods' levels are all there
// is, or nil: the agent's word that it looked at every pod (Swept) is
// valid, and every finding written before that look began was read, the
// reading no more than MaxLag behind. A clean pod leaves no finding: no
// finding reads as clean only with both. agent is the readiness a valid
// word gives (Swept.Readiness), ready when it gives none.
func (m *Marker) look(now time.Time) (agent string, err error) {
	if m.Swept == "" {
		return Ready, nil
	}
	s, err := findings.ReadSwept(m.Swept, m.node, now)
	if err != nil {
		return Ready, err
	}
	agent = cmp.Or(s.Readiness, Ready)
	if m.CaughtUp == nil {
		return agent, nil
	}
	switch c := m.CaughtUp(); {
	case now.Sub(c) > MaxLag:
		return agent, fmt.Errorf("the findings were last all read at %s, more than %v ago: one held (API server, webhook) may be a pod's usage", c.UTC().Format(time.RFC3339), MaxLag)
	case !c.Before(s.Since):
		m.vouched = now
	case m.vouched.IsZero() || now.Sub(m.vouched) > readGrace:
		// A word moved on by a later scan (a pod started) while its
		// finding is being read gets readGrace: the label does not
		// flap for each new pod.
		return agent, fmt.Errorf("the findings written before the agent's look of %s are not all read yet", s.Since.UTC().Format(time.RFC3339))
	}
	return agent, nil
}

// readGrace is how long the reading may stay behind a word that moved on
// before the label says unknown; lookEvery how often the label looks at
// the word (and the reading) again.
const (
	readGrace = 30 * time.Second
	lookEvery = 5 * time.Second
)

// Consume sets rec's pod's (or the node's) level and patches the label
// when its value changes. It never returns an error: the label must not
// hold the line (see the package doc).
func (m *Marker) Consume(ctx context.Context, rec findings.Record) error {
	key, e := nodeKey, Entry{Seen: rec.Time}
	if rec.KnownSubject() == findings.SubjectPod {
		if rec.Pod.UID == "" {
			return nil
		}
		key, e.Namespace, e.Name = rec.Pod.UID, rec.Pod.Namespace, rec.Pod.Name
	}
	m.mu.Lock()
	old, had := m.entries[key]
	e.Command = old.Command
	switch st := rec.KnownState(); {
	case st == findings.StatePresent && rec.CommandOnly():
		// A command's own finding (the exec watch's read or failed
		// write) says nothing of the rules: clearing the pod's level
		// would label a pod with legacy rules ready the moment it ran
		// `iptables -L`. Its own level (a write refused for missing
		// kernel support is the RHEL 10 breakage itself) counts, for
		// the pod's life; one without a level changes nothing.
		if rec.WorstLevel() == "" {
			break
		}
		if key == nodeKey {
			// The node lives on: a host's one-off command (an admin's
			// `iptables-legacy -L`) counts until its next look.
			e.Level = worseOf(old.Level, rec.WorstLevel())
		} else {
			e.Level, e.Command = old.Level, worseOf(old.Command, rec.WorstLevel())
		}
		m.entries[key] = e
	case st == findings.StateGone || (st == findings.StatePresent && !rec.HasUsage()):
		if e.Command == "" {
			delete(m.entries, key)
			break
		}
		// The rules are gone, not what its commands said.
		m.entries[key] = e
	case st == findings.StateUnknown:
		e.Level = incomplete(old, had)
		m.entries[key] = e
	default:
		e.Level = rec.WorstLevel()
		if e.Level == "" {
			e.Level = "unclassified"
		}
		// A look that stopped early (Truncated: the x_tables lock kept
		// busy, the deadline, a rule hiding the later ones) saw part of
		// the usage: native rules seen say nothing of the rest, so the
		// pod is unknown unless what was seen is already worse.
		if rec.Truncated && !worse(e.Level, Unknown) {
			e.Level = incomplete(old, had)
		}
		m.entries[key] = e
	}
	now, has := m.entries[key]
	if m.held {
		m.bound()
		m.mu.Unlock()
		return nil
	}
	if had != has || old.Level != now.Level || old.Command != now.Command {
		m.bound()
		m.save()
	}
	m.mu.Unlock()
	m.apply(ctx, false)
	return nil
}

// incomplete is the level after a look that could not see everything:
// Unknown, or the pod's earlier level when worse. A pod seen with
// legacy rules that then keeps the x_tables lock busy (issue 18) would
// otherwise turn the node from breaks to unknown, which the pool gate
// lets upgrade; only a complete look may take a level back.
func incomplete(old Entry, had bool) string {
	if had && old.Level != "" && worse(old.Level, Unknown) {
		return old.Level
	}
	return Unknown
}

// Flush labels after the runner handled a batch of lines (a
// consumer.Flusher): the findings read up to a later moment may let the
// agent's word vouch now where it could not while a line of the batch
// was consumed. Never an error, as Consume. Nothing while held.
func (m *Marker) Flush(ctx context.Context) error {
	m.mu.Lock()
	held := m.held
	m.mu.Unlock()
	if !held {
		m.apply(ctx, false)
	}
	return nil
}

// bound drops entries beyond MaxEntries, the mildest level first, then
// the oldest sighting: pods churned through the node (a hostile
// namespace's short-lived pods, each with a finding) must not push out
// the one that breaks it and so label it ready. m.mu held.
func (m *Marker) bound() {
	for len(m.entries) > MaxEntries {
		victim, vr := "", ""
		for k, e := range m.entries {
			r := readiness(e.level())
			switch {
			case victim == "":
			case r == vr && e.Seen.Before(m.entries[victim].Seen):
			case r != vr && findings.WorseReadiness(r, vr) == vr:
			default:
				continue
			}
			victim, vr = k, r
		}
		delete(m.entries, victim)
	}
}

// readiness is the label an entry's level alone gives.
func readiness(level string) string {
	if level == Unknown {
		return findings.ReadinessUnknown
	}
	return findings.Readiness(level)
}

// save writes the state file; m.mu held. A failure is logged: the label
// is still right until the next restart.
func (m *Marker) save() {
	data, err := json.Marshal(state{Entries: m.entries})
	if err == nil {
		err = fileio.WriteFile(m.path, data, 0o600)
	}
	if err != nil {
		m.log.WithError(err).Warn("could not save the node label's state; a restart forgets the pods seen so far")
	}
}

// apply patches the label when the API does not hold its value yet, or
// last took it a Prune ago: anyone may have removed or changed it since
// (the forwarder may not read Nodes), and a gate must see it. Not in the
// first MaxLag after Start while the findings were never all read: the
// label the last run left stays until this run can say better.
func (m *Marker) apply(ctx context.Context, retry bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.waitingAt(now) {
		return
	}
	v := m.value(now)
	if v == m.applied && now.Sub(m.appliedAt) < m.Prune {
		return
	}
	// A value whose patch failed is the retry ticker's to try again: a
	// refused patch (no RBAC, no such Node) would cost a request a
	// finding.
	if !retry && m.failed != "" && v == m.failed {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{m.label: v}}})
	_, err := m.kube.CoreV1().Nodes().Patch(ctx, m.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "iptables-alerter"})
	if err != nil {
		m.failed = v
		m.patches.WithLabelValues("error").Inc()
		if err.Error() != m.warned {
			m.warned = err.Error()
			m.log.WithError(err).WithField("label", m.label+"="+v).Warn("could not label the node (packaging/rbac/node-label.yaml grants it); trying again every " + m.Retry.String())
		}
		return
	}
	m.patches.WithLabelValues("ok").Inc()
	// The first ready is no news, nor is a value taken again.
	if m.warned != "" || (v != m.applied && (m.applied != "" || v != Ready)) {
		m.log.WithField("label", m.label+"="+v).Info("node labelled")
	}
	m.applied, m.appliedAt, m.warned, m.failed = v, now, "", ""
}

// waiting tells whether apply still waits for the findings to be read
// once after Start (at most MaxLag).
func (m *Marker) waiting() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waitingAt(time.Now())
}

// waitingAt is waiting at now; m.mu held.
func (m *Marker) waitingAt(now time.Time) bool {
	return m.CaughtUp != nil && m.CaughtUp().IsZero() && now.Sub(m.started) < MaxLag
}

// Start labels the node once the findings were read once (CaughtUp; the
// label the last run left stays until then, at most MaxLag), then tries
// failed patches again and looks at the agent's word every Retry, and
// drops deleted pods and patches the label again every Prune, until ctx
// ends.
func (m *Marker) Start(ctx context.Context) {
	m.mu.Lock()
	m.started = time.Now()
	m.mu.Unlock()
	m.apply(ctx, true)
	go func() {
		retry, prune, look := time.NewTicker(m.Retry), time.NewTicker(m.Prune), time.NewTicker(lookEvery)
		defer retry.Stop()
		defer prune.Stop()
		defer look.Stop()
		// Labelled as soon as the findings were read once (apply waits
		// for that), not a Retry later.
		for m.waiting() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		m.apply(ctx, true)
		for {
			select {
			case <-ctx.Done():
				return
			case <-retry.C:
				m.apply(ctx, true)
			case <-look.C:
				// The agent's word or the reading moved: the label
				// follows within lookEvery, a refused value left to
				// the retry.
				_ = m.Flush(ctx)
			case <-prune.C:
				m.prune(ctx)
				m.apply(ctx, true)
			}
		}
	}()
}

// prune drops pods that no longer exist as the pod recorded, or ended.
func (m *Marker) prune(ctx context.Context) {
	m.mu.Lock()
	pods := map[string]Entry{}
	for k, e := range m.entries {
		if k != nodeKey {
			pods[k] = e
		}
	}
	m.mu.Unlock()
	var gone []string
	for uid, e := range pods {
		// As the forwarder finds a finding's pod: a static pod's records
		// carry its config hash, which only its mirror pod's annotation
		// names, and a pod no name can belong to is gone too.
		pod, err := kubeapi.LivePod(ctx, m.kube, findings.Pod{Namespace: e.Namespace, Name: e.Name, UID: uid})
		switch {
		case kubeapi.IsPodGone(err) || kubeapi.IsInvalid(err):
			gone = append(gone, uid)
		case err == nil && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed):
			// Ended (evicted, completed): its network namespace is gone
			// from the node, while the object may stay until the
			// terminated-pod collector's threshold (12,500 pods by
			// default), and its rules are no part of what the node runs.
			gone = append(gone, uid)
		case kubeapi.Retryable(err):
			m.log.WithError(err).Debug("node label: could not tell whether a pod is gone; will look again")
			return
		case err != nil:
			// Refused for this pod alone: the others are still looked at.
			m.log.WithError(err).Debug("node label: could not tell whether a pod is gone")
		}
	}
	if len(gone) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, uid := range gone {
		delete(m.entries, uid)
	}
	m.save()
}
