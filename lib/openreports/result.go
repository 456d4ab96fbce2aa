package openreports

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/modules"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
)

// Names in the Report objects.
const (
	// Source names us as the engine behind a Report and its results.
	Source = "iptables-alerter"
	// Policy is the policy of every usage result; the rule is the level.
	Policy = "iptables-usage"
	// Category groups our results for readers of several engines' reports.
	Category = "RHEL 10 readiness"
	// ManagedByLabel marks our Reports for readers and for our own lists.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "iptables-alerter"
	// NodeLabel names the node whose forwarder owns the Report.
	NodeLabel = "iptables-alerter.io/node"
	// CutAnnotation counts the results left out since the Report was made.
	CutAnnotation = "iptables-alerter.io/results-cut"
	// CutRule is the rule of the skip result that says results were cut.
	CutRule = "results-cut"
	// RuleUnknown, RuleUnclassified and RuleFailedCommand are the rules
	// besides the levels. RuleFailedCommand is a command's own finding
	// with no level (findings.Record.CommandOnly): a write that failed
	// for a reason of its own, not missing kernel support, on a pod with
	// no rules seen; unclassified would say it holds rules of a level not
	// known.
	RuleUnknown       = "unknown"
	RuleUnclassified  = "unclassified"
	RuleFailedCommand = "failed-command"
)

// Property keys of a result.
const (
	PropPodUID      = "podUID"
	PropOwner       = "owner"
	PropPods        = "pods"
	PropNodes       = "nodes"
	PropContainer   = "container"
	PropVendor      = "vendor"
	PropHint        = "hint"
	PropDoc         = "doc" // the first vendor's documentation link
	PropFirstSeen   = "firstSeen"
	PropLastSeen    = "lastSeen"
	PropFingerprint = "fingerprint"
	PropRules       = "rules"
	PropError       = "error"
	PropTruncated   = "truncated"
	PropExample     = "example" // example1 .. exampleN
	// PropWriter names the process whose change the agent's watch looked
	// after (wording.WriterLine); absent when the record has none.
	PropWriter = "writer"
	// PropResultID keys the result in Policy Reporter (its
	// v1alpha2.ResultIDKey): without it, it derives a key from the
	// Report's scope (the workload), policy, rule, status, category and
	// message, the same for every pod of a workload at one level, and
	// keeps one of them. ResultID makes it.
	PropResultID = "resultID"
	// PropCommand is the iptables command the exec watch saw
	// (wording.ExecLine: FAILED first when it failed); absent when none.
	PropCommand = "command"
	// PropModules lists the kernel modules a RHEL 10 release may lack
	// that the pod's breaking rules need (findings.Modules.Judged),
	// comma-separated; absent when none.
	PropModules = "modules"
	// PropMixedBackends is "true" when the pod's netns holds iptables
	// rules in both legacy x_tables and nftables; absent otherwise.
	PropMixedBackends = "mixedBackends"
)

// Bounds of one result.
const (
	// MaxProperty bounds each property value in bytes.
	MaxProperty = 256
	// MaxExamples is how many example rules a result carries.
	MaxExamples = 3
)

// Verdict is how a record maps onto the API's result and severity enums.
type Verdict struct {
	Rule     string
	Result   openreportsv1alpha1.Result
	Severity openreportsv1alpha1.ResultSeverity
}

// Verdicts lists the mapping in the order the README gives it: legacy
// rules break on RHEL 10 (no ip_tables modules), xt rules break unless
// kernel-modules-extra is installed, native rules keep loading; an
// inspection that could not finish is an error, never clean.
var Verdicts = []Verdict{
	{Rule: findings.ImpactLegacy, Result: "fail", Severity: "high"},
	{Rule: findings.ImpactXt, Result: "fail", Severity: "medium"},
	{Rule: findings.ImpactNative, Result: "warn", Severity: "low"},
	{Rule: RuleUnclassified, Result: "warn", Severity: "medium"},
	{Rule: RuleFailedCommand, Result: "warn", Severity: "medium"},
	{Rule: RuleUnknown, Result: "error", Severity: "medium"},
}

// VerdictOf maps a record whose state is present or unknown. A look that
// stopped early (Truncated) and saw native rules alone is unknown, not
// native: the rules it did not see may be legacy (the node label and
// `report` say unknown of it too); one that saw worse keeps what it saw.
func VerdictOf(rec findings.Record) Verdict {
	rule := RuleUnknown
	if rec.KnownState() == findings.StatePresent {
		rule = rec.WorstLevel()
		switch {
		case rule == findings.ImpactNative && rec.Truncated:
			rule = RuleUnknown
		case rule == "" && rec.CommandOnly() && rec.Failed():
			rule = RuleFailedCommand
		case rule == "":
			rule = RuleUnclassified
		}
	}
	for _, v := range Verdicts {
		if v.Rule == rule {
			return v
		}
	}
	return Verdicts[len(Verdicts)-1]
}

// moduleList joins whole module names, sorted, up to MaxProperty bytes;
// past it those the release table verifies are kept first: a name cut at
// the bound would be read back as no module's (and the result as forged),
// and by name ebt_*, ip6t_* and ipt_* come before nft_compat and xt_CT,
// the ones a reader acts on.
func moduleList(names []string) string {
	picked, size := []string{}, -1
	for _, verified := range []bool{true, false} {
		for _, n := range names {
			if n = safetext.Display(n); modules.Releases.Verified(n) == verified && size+1+len(n) <= MaxProperty {
				picked, size = append(picked, n), size+1+len(n)
			}
		}
	}
	slices.Sort(picked)
	return strings.Join(picked, ",")
}

// prop makes text from the record safe and bounded for a property.
func prop(s string) string { return safetext.Cut(safetext.Display(s), MaxProperty) }

// resultOf is the pod's result; first is the first sighting kept from an
// earlier result (zero: this one).
func resultOf(rec findings.Record, pod *corev1.Pod, o owner.Owner, ref metav1.OwnerReference, node string, first time.Time) openreportsv1alpha1.ReportResult {
	// A cut look's note says what it saw and that the rest may break.
	msg := wording.Note(rec, o)
	if rec.KnownState() != findings.StatePresent {
		msg = wording.UnknownNote(rec, o)
	}
	x := common(rec, node, first, msg)
	x.Subjects = subjects(pod, ref)
	x.Properties[PropPodUID] = prop(rec.Pod.UID)
	x.Properties[PropOwner] = prop(o.String())
	x.Properties[PropPods] = prop(pod.Name)
	if rec.Container != "" {
		x.Properties[PropContainer] = prop(rec.Container)
	}
	return x
}

// ResultID is a result's PropResultID: a level (resultKey's), its subject
// (a pod's UID, a node's name) and its Report's name. Policy Reporter
// keys results by it in all Reports at once (its database's primary key,
// a row whose key is taken is dropped) and notifies its targets of a key
// new to a Report: with the level in it, a pod whose rules got worse is
// news (a key of the pod alone notified only its first level); with the
// Report in it, a pod moved to another Report is not dropped there while
// its old Report still holds it. One too long for a property is the level
// and a hash of the whole: cut, it would lose the end of a long Report
// name, the hash that tells it from others (kubeapi.ObjectName).
func ResultID(rule, subject, report string) string {
	id := safetext.Display(rule + "/" + subject + "/" + report)
	if len(id) > MaxProperty {
		h := sha256.Sum256([]byte(id))
		id = prop(rule) + "/" + hex.EncodeToString(h[:16])
	}
	return id
}

// resultKey is the resultID of a result of rule whose previous result of
// the subject in this Report was old (nil: none). Its level is the level
// now if it is graver than the one old's key holds (news), else the old
// key's, so that a pod is notified once each time its rules get worse,
// not when they get better, when an inspection fails (unknown: the
// agent's own alerts tell that) or again when they flap back. A key not
// of this form (another release's) gives the level now.
func resultKey(old *openreportsv1alpha1.ReportResult, rule, subject, report string) string {
	if old != nil {
		key := old.Properties[PropResultID]
		was, _, _ := strings.Cut(key, "/")
		if key != "" && key == ResultID(was, subject, report) && (rule == RuleUnknown || !graver(rule, was)) {
			rule = was
		}
	}
	return ResultID(rule, subject, report)
}

// common is the part of a result a pod's and a node's share: verdict,
// sightings, counts, vendors, writer and examples; msg is its description.
func common(rec findings.Record, node string, first time.Time, msg string) openreportsv1alpha1.ReportResult {
	v := VerdictOf(rec)
	when := rec.Time
	if when.IsZero() {
		when = time.Now()
	}
	when = when.UTC()
	if first.IsZero() || first.After(when) {
		first = when
	}
	if rec.Node != "" {
		node = rec.Node
	}
	p := map[string]string{
		PropNodes:       prop(node),
		PropFirstSeen:   first.Format(time.RFC3339),
		PropLastSeen:    when.Format(time.RFC3339),
		PropFingerprint: prop(rec.Fingerprint),
	}
	if rec.HasUsage() {
		l := rec.Levels()
		p[PropRules] = "legacy=" + strconv.Itoa(l.Legacy) + " xt=" + strconv.Itoa(l.Xt) + " native=" + strconv.Itoa(l.Native) +
			" total=" + strconv.Itoa(rec.Nft.Rules+rec.Legacy.Rules)
	}
	if len(rec.Vendors) > 0 {
		names := make([]string, 0, len(rec.Vendors))
		for _, vd := range rec.Vendors {
			names = append(names, vd.Name)
		}
		p[PropVendor] = prop(strings.Join(names, ","))
		if rec.Vendors[0].Hint != "" {
			p[PropHint] = prop(rec.Vendors[0].Hint)
		}
		// Whole or not at all: a link escaped or cut leads elsewhere.
		if d := rec.Vendors[0].Doc; d != "" && prop(d) == d {
			p[PropDoc] = d
		}
	}
	if rec.Error != "" {
		p[PropError] = prop(rec.Error)
	}
	if rec.Truncated {
		p[PropTruncated] = "true"
	}
	if rec.MixedBackends {
		p[PropMixedBackends] = "true"
	}
	if m := moduleList(rec.Modules.Judged()); m != "" {
		p[PropModules] = m
	}
	if rec.Writer != nil {
		p[PropWriter] = prop(wording.WriterLine(rec.Writer))
	}
	if rec.Exec != nil {
		p[PropCommand] = prop(wording.ExecLine(rec.Exec))
	}
	for i, ex := range findings.BreakingFirst(rec.Examples) {
		if i == MaxExamples {
			break
		}
		p[PropExample+strconv.Itoa(i+1)] = prop(wording.ExampleLine(ex))
	}
	return openreportsv1alpha1.ReportResult{
		Source:      Source,
		Policy:      Policy,
		Rule:        v.Rule,
		Category:    Category,
		Severity:    v.Severity,
		Result:      v.Result,
		Scored:      true,
		Timestamp:   metav1.Timestamp{Seconds: when.Unix(), Nanos: int32(when.Nanosecond())},
		Description: msg,
		Properties:  p,
	}
}

// subjects are the result's: the owning workload first, then the pod (the
// pod alone when it has no controller). Policy Reporter files a result
// under its first subject in its resource view (and Kyverno's readers
// alike): the workload is stable across rollouts, where one entry per pod
// would pile up an entry per pod ever started. The pod stays in the
// result as the second subject (PodSubject) and in its properties.
func subjects(pod *corev1.Pod, ref metav1.OwnerReference) []corev1.ObjectReference {
	p := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	if ref.Kind == "" || ref.Kind == "Pod" && ref.UID == pod.UID {
		return []corev1.ObjectReference{p}
	}
	w := corev1.ObjectReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: pod.Namespace, Name: ref.Name, UID: ref.UID}
	return []corev1.ObjectReference{w, p}
}

// PodSubject is the result's pod: its first subject of kind Pod (results
// written before the workload came first name only the pod).
func PodSubject(x openreportsv1alpha1.ReportResult) (corev1.ObjectReference, bool) {
	for _, s := range x.Subjects {
		if IsPod(s.APIVersion, s.Kind) {
			return s, true
		}
	}
	return corev1.ObjectReference{}, false
}

// IsPod says whether a subject of this API version and kind is a Pod (a
// reader that decodes results its own way uses it, as PodSubject does).
func IsPod(apiVersion, kind string) bool {
	return kind == "Pod" && (apiVersion == "" || apiVersion == "v1")
}

// Seen is the result's last sighting, zero when unreadable.
func Seen(r openreportsv1alpha1.ReportResult) time.Time {
	return SeenAt(r.Properties[PropLastSeen])
}

// SeenAt reads a lastSeen property's value, zero when unreadable (Seen,
// for a reader that decodes results its own way).
func SeenAt(v string) time.Time {
	t, _ := time.Parse(time.RFC3339, v)
	return t
}

// firstSeen is the result's first sighting, zero when unreadable.
func firstSeen(r openreportsv1alpha1.ReportResult) time.Time {
	t, _ := time.Parse(time.RFC3339, r.Properties[PropFirstSeen])
	return t
}

// after is the pod's (or the node's) result once rec is in, given the
// result it had (old) and the one rec alone makes (x). A look at the
// rules replaces old, keeping the last command seen when rec has none: a
// failed write leaves no rule, and a later look must not erase that it
// was tried. A look that could not see everything (findings.Record.Partial)
// replaces old only when it says worse: old's level, counts and examples
// stay, with x's sighting and why it fell short, until a whole look. A
// command's own finding (findings.Record.CommandOnly) says nothing of the
// rules: old stays, with the command added and rec's level when worse (a
// write refused for missing kernel support breaks).
func after(old, x openreportsv1alpha1.ReportResult, rec findings.Record) openreportsv1alpha1.ReportResult {
	cmd, had := old.Properties[PropCommand]
	if !rec.CommandOnly() {
		if rec.Partial() && graver(old.Rule, x.Rule) {
			x = withSighting(old, x)
		}
		if _, ok := x.Properties[PropCommand]; !ok && had {
			x.Properties[PropCommand] = cmd
		}
		return x
	}
	out := cloned(old)
	// A failed command says more than one that worked or read: it stays
	// until another fails.
	if c := x.Properties[PropCommand]; !had || !wording.FailedLine(cmd) || wording.FailedLine(c) {
		out.Properties[PropCommand] = c
	}
	if seen := Seen(x); seen.After(Seen(old)) {
		out.Properties[PropLastSeen] = x.Properties[PropLastSeen]
		out.Timestamp = x.Timestamp
	}
	if graver(x.Rule, old.Rule) {
		out.Rule, out.Result, out.Severity, out.Description = x.Rule, x.Result, x.Severity, x.Description
	}
	return out
}

// withSighting is old with x's sighting: its time, its error and whether
// it was truncated, the rest (level, counts, examples, writer) old's.
func withSighting(old, x openreportsv1alpha1.ReportResult) openreportsv1alpha1.ReportResult {
	out := cloned(old)
	out.Timestamp = x.Timestamp
	for _, k := range []string{PropLastSeen, PropError, PropTruncated} {
		if v, ok := x.Properties[k]; ok {
			out.Properties[k] = v
		} else {
			delete(out.Properties, k)
		}
	}
	return out
}

// cloned is r with properties of its own to change.
func cloned(r openreportsv1alpha1.ReportResult) openreportsv1alpha1.ReportResult {
	r.Properties = maps.Clone(r.Properties)
	if r.Properties == nil {
		r.Properties = map[string]string{}
	}
	return r
}

// graver reports whether rule a says worse of a pod than rule b: what
// breaks first (legacy, then xt), then unknown (it may hide either), then
// native, then unclassified.
func graver(a, b string) bool {
	order := []string{findings.ImpactLegacy, findings.ImpactXt, RuleUnknown, findings.ImpactNative, RuleUnclassified, RuleFailedCommand}
	rank := func(r string) int {
		if i := slices.Index(order, r); i >= 0 {
			return i
		}
		return len(order)
	}
	return rank(a) < rank(b)
}
