package report

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
)

// Item is one finding as the report sees it.
type Item struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	PodUID    string `json:"pod_uid"`
	Node      string `json:"node"`
	// Owner is the owning workload; from a findings file without a cluster
	// it is the Pod itself (names do not tell owners reliably).
	Owner  owner.Owner     `json:"owner"`
	Impact findings.Impact `json:"impact"`
	Worst  string          `json:"worst"`
	// Modules are the kernel modules the finding's rules need, per
	// level; from a Report only the judged ones (findings.Modules.Judged,
	// read back as the xt level's), empty from Events and older files.
	Modules findings.Modules `json:"modules"`
	// MixedBackends: the pod's netns held iptables rules in both legacy
	// x_tables and nftables (findings.Record.MixedBackends).
	MixedBackends bool               `json:"mixed_backends"`
	Vendors       []findings.Vendor  `json:"vendors"`
	Examples      []findings.Example `json:"examples"`
	// Source names where the item came from: a file, "events" or
	// "reports".
	Source string `json:"source"`
	// State is the finding's (findings.State): present items are usage,
	// unknown ones an inspection that could not finish (Error says why),
	// gone ones clear the pod's earlier items (GroupItems). Time orders
	// them: the record's (an Event's eventTime, which the forwarder sets
	// to it; zero for an Event without one).
	State findings.State `json:"state"`
	Error string         `json:"error"`
	Time  time.Time      `json:"time"`
	// Truncated is true for a look that stopped early: its counts are a
	// lower bound, and a complete look of the pod counts instead (newer).
	// Events of forwarders before events.Summary.Truncated do not say it.
	Truncated bool `json:"truncated"`
	// Writer names the process whose change the agent's watch looked
	// after (wording.WriterLine), "" when the finding names none.
	Writer string `json:"writer"`
	// Command is the iptables command the exec watch saw
	// (wording.ExecLine: FAILED first when it failed), "" when none.
	Command string `json:"command"`
	// Posted is set on an item read from an Event or a Report result,
	// which anyone who may write one in the namespace could have forged:
	// such a look never replaces an older look's level (podLevel), so a
	// forgery can hold a gate, never pass one. Not in the JSON: set on
	// reading.
	Posted bool `json:"-"`
	// Looked is set on an item that is a look at the rules whatever its
	// counts say: one of rules not classified (its counts are all 0), cut
	// short or unknown, that names a command too (a Report result keeps
	// the pod's last; the agent names the command that made it look), and
	// must not read as that command's own finding (commandOnly). Not in
	// the JSON.
	Looked bool `json:"-"`
}

// maxLine bounds a findings line read back; the hook writes at most
// findings.MaxRecordBytes, anything far longer is not ours.
const maxLine = 16 * findings.MaxRecordBytes

// Skipped counts what the inputs held that is not an Item.
type Skipped struct {
	// Malformed lines or Events (not JSON, another schema, over the bound).
	Malformed int `json:"malformed"`
	// Invalid values in the Items read (a level, a count, a name, an
	// owner, a link) that were replaced or dropped: see valid.
	Invalid int `json:"invalid"`
	// Cut counts results the Reports read had no room for (their
	// results-cut notes). Under SourceAuto their namespaces' Events are
	// read too, which hold those pods while the API server keeps them;
	// the findings files hold them all.
	Cut int `json:"cut"`
	// CutUnseen counts those of Cut whose namespace's Events the report
	// did not read (SourceReports): no input it read shows those pods, so
	// a --fail-on gate cannot pass it (GateBlind).
	CutUnseen int `json:"cut_unseen"`
	// CutUnseenIn names the namespaces of CutUnseen, sorted within a
	// cluster; over several clusters, "NAMESPACE (context NAME)", cluster
	// after cluster.
	CutUnseenIn []string `json:"cut_unseen_in,omitempty"`
	// GoneNodes counts the ClusterReports of nodes the cluster no longer
	// lists (nothing deletes a removed node's): left out.
	GoneNodes int `json:"gone_nodes,omitempty"`
}

// cutUnseen counts the results the Reports of each namespace of cut left
// out (cut[namespace]) as unseen: the report reads none of those
// namespaces' Events.
func (sk *Skipped) cutUnseen(cut map[string]int) {
	for _, ns := range slices.Sorted(maps.Keys(cut)) {
		if cut[ns] > 0 {
			sk.CutUnseen += cut[ns]
			sk.CutUnseenIn = append(sk.CutUnseenIn, ns)
		}
	}
}

// ReadFindings reads a findings file: one Item per record, whatever its
// state (a record without usage, before states, is read as unknown).
func ReadFindings(path string, sk *Skipped) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open findings: %w", err)
	}
	defer f.Close()
	var items []Item
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := readLine(r)
		if len(line) > 0 {
			rec, perr := findings.Parse(line)
			switch {
			case perr != nil:
				sk.Malformed++
			default:
				items = append(items, valid(itemOf(rec, path), sk))
			}
		}
		if errors.Is(err, io.EOF) {
			return items, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read findings %q: %w", path, err)
		}
	}
}

// errLong marks a line over maxLine; it is returned empty and skipped.
var errLong = errors.New("line too long")

// readLine returns the next line without its newline; an over-long line is
// read to its end and returned as a single byte that will not parse.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	long := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !long {
			line = append(line, chunk...)
			if len(line) > maxLine {
				long, line = true, []byte{'!'}
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		return line, err
	}
}

func itemOf(rec findings.Record, source string) Item {
	if rec.KnownSubject() == findings.SubjectNode {
		it := itemOf(findings.Record{}, source)
		it.Node, it.Owner = rec.Node, nodeOwner(rec.Node)
		// A record written before node hints carries the pod's wording.
		it.Impact, it.Worst, it.Vendors, it.Examples = rec.Levels(), rec.WorstLevel(), catalog.NodeWords(rec.Vendors), rec.Examples
		it.Modules, it.MixedBackends = rec.Modules, rec.MixedBackends
		it.State, it.Error, it.Time, it.Writer = rec.KnownState(), rec.Error, rec.Time, wording.WriterLine(rec.Writer)
		it.Truncated, it.Command = rec.Truncated, wording.ExecLine(rec.Exec)
		it.Looked = looked(rec)
		return it
	}
	return Item{
		Namespace: rec.Pod.Namespace, Pod: rec.Pod.Name, PodUID: rec.Pod.UID, Node: rec.Node,
		Owner:  owner.Bare(rec.Pod.Name),
		Impact: rec.Levels(), Worst: rec.WorstLevel(), Modules: rec.Modules, Vendors: rec.Vendors, Examples: rec.Examples,
		MixedBackends: rec.MixedBackends,
		Source:        source, State: rec.KnownState(), Error: rec.Error, Time: rec.Time, Writer: wording.WriterLine(rec.Writer),
		Truncated: rec.Truncated, Command: wording.ExecLine(rec.Exec), Looked: looked(rec),
	}
}

// looked tells a record of a look at the rules (Item.Looked): the agent
// names on a scan's record the command that made it look, and a look
// that held rules of no known level, or stopped early, counts nothing
// by level beside it.
func looked(rec findings.Record) bool { return !rec.CommandOnly() || rec.Truncated }

// FindingsFiles expands each path to its rotated generations PATH.N ...
// PATH.1 (oldest first) and itself, without repeats: the files the
// forwarder reads, found the way it finds them (lib/follow).
func FindingsFiles(paths []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		gens, err := findings.Generations(p)
		if err != nil {
			return nil, err
		}
		if len(gens) == 0 {
			// No directory: keep the path, so reading it says what is wrong.
			gens = []string{p}
		}
		for _, g := range gens {
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	return out, nil
}

// event is the part of an Event the report reads, in either API's field
// names: core/v1 (what `kubectl get events -o json` prints) and
// events.k8s.io/v1.
type event struct {
	Metadata struct {
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Reason string `json:"reason"`
	// EventTime is the record's time (the forwarder's base); core/v1
	// names it alike.
	EventTime           metav1.MicroTime       `json:"eventTime"`
	InvolvedObject      corev1.ObjectReference `json:"involvedObject"`
	Regarding           corev1.ObjectReference `json:"regarding"`
	ReportingComponent  string                 `json:"reportingComponent"`
	ReportingController string                 `json:"reportingController"`
	ReportingInstance   string                 `json:"reportingInstance"`
}

// maxEventsFile bounds a saved events file: a large cluster's events fit.
const maxEventsFile = 1 << 30

// ReadEvents reads a saved `kubectl get events -A -o json` (a List, or a
// single Event) and gives an Item per pod Event of ours.
func ReadEvents(r io.Reader, source string, sk *Skipped) ([]Item, error) {
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	data, err := fileio.ReadLimited(r, maxEventsFile)
	if err != nil {
		return nil, fmt.Errorf("read events %q: %w", source, err)
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("decode events %q: %w", source, err)
	}
	if list.Items == nil && list.Kind == "Event" {
		list.Items = []json.RawMessage{data}
	}
	var items []Item
	for _, raw := range list.Items {
		var ev event
		if err := json.Unmarshal(raw, &ev); err != nil {
			sk.Malformed++
			continue
		}
		if it, ok := ev.item(source, sk); ok {
			items = append(items, valid(it, sk))
		}
	}
	return items, nil
}

// reasons are the reasons of our pod Events, and the state each stands for.
var reasons = map[string]findings.State{events.Reason: findings.StatePresent, events.UnknownReason: findings.StateUnknown}

// ClusterEvents lists the live cluster's Events of ours in namespace (all
// when empty), page by page, one reason after the other (a field selector
// holds no "or").
func ClusterEvents(ctx context.Context, client kubernetes.Interface, namespace string, sk *Skipped) ([]Item, error) {
	var items []Item
	err := eachClusterEvent(ctx, client, namespace, sk, func(it Item) { items = append(items, it) })
	return items, err
}

// eachClusterEvent is ClusterEvents handing each Item to add as its page
// is read: a caller that drops most keeps none of them.
func eachClusterEvent(ctx context.Context, client kubernetes.Interface, namespace string, sk *Skipped, add func(Item)) error {
	for _, reason := range []string{events.Reason, events.UnknownReason} {
		if err := clusterEvents(ctx, client, namespace, fields.OneTermEqualSelector("reason", reason).String(), sk, add); err != nil {
			return err
		}
	}
	return nil
}

// eventsPage is the Events asked for a page: a page is held whole while
// it is read, on top of the Reports' results already folded.
const eventsPage = 100

func clusterEvents(ctx context.Context, client kubernetes.Interface, namespace, selector string, sk *Skipped, add func(Item)) error {
	opts := metav1.ListOptions{FieldSelector: selector, Limit: eventsPage}
	for {
		l, err := client.CoreV1().Events(namespace).List(ctx, opts)
		if apierrors.IsForbidden(err) {
			return &ForbiddenError{Verb: "list", Resource: ResourceEvents, Namespace: namespace, Err: err}
		}
		if err != nil {
			return fmt.Errorf("list events: %w", err)
		}
		if err := checkPage("events", len(l.Items), opts.Limit); err != nil {
			return err
		}
		for i := range l.Items {
			e := &l.Items[i]
			var ev event
			ev.Metadata.Namespace, ev.Metadata.Annotations = e.Namespace, e.Annotations
			ev.Reason, ev.InvolvedObject, ev.EventTime = e.Reason, e.InvolvedObject, e.EventTime
			ev.ReportingController, ev.ReportingInstance = e.ReportingController, e.ReportingInstance
			if it, ok := ev.item("events", sk); ok {
				add(valid(it, sk))
			}
		}
		if l.Continue == "" {
			return nil
		}
		opts.Continue = l.Continue
	}
}

// item reads one Event; only pod Events our forwarder posted count (the
// Node summaries repeat them).
func (ev event) item(source string, sk *Skipped) (Item, bool) {
	controller := ev.ReportingController
	if controller == "" {
		controller = ev.ReportingComponent
	}
	obj := ev.Regarding
	if obj.Kind == "" {
		obj = ev.InvolvedObject
	}
	state, ours := reasons[ev.Reason]
	node := isNodeEvent(obj, ev.Metadata.Annotations)
	if !ours || controller != events.Controller || (obj.Kind != "Pod" && !node) {
		return Item{}, false
	}
	// The Event's own namespace is who could write it: the API server
	// accepts an Event (with an eventTime) in one namespace regarding a pod
	// of another, or a Node. Ours are posted in the pod's namespace, a
	// node's in events.NodeEventNamespace; any other is not ours, and must
	// not put findings under another namespace's workloads or a node.
	ns := obj.Namespace
	if own := ev.Metadata.Namespace; own != "" {
		if node && own != events.NodeEventNamespace || !node && ns != "" && ns != own {
			sk.Invalid++
			return Item{}, false
		}
		ns = own
	}
	it := Item{Namespace: ns, Pod: obj.Name, PodUID: string(obj.UID), Node: ev.ReportingInstance, Owner: owner.Bare(obj.Name), Source: source, State: state,
		Time: ev.EventTime.Time}
	if node {
		it = Item{Node: obj.Name, Owner: nodeOwner(obj.Name), Source: source, State: state, Time: ev.EventTime.Time}
	}
	it.Posted = true
	raw, ok := ev.Metadata.Annotations[events.SummaryAnnotation]
	if !ok {
		// An Event of an older forwarder: the pod is known, nothing more.
		return it, true
	}
	var s events.Summary
	if len(raw) > maxLine || json.Unmarshal([]byte(raw), &s) != nil {
		sk.Malformed++
		return it, true
	}
	// A node's finding is the node's (podOf keys it by KindNode): an
	// owner its summary names does not move it under a workload.
	if s.Owner.Kind != "" && s.Owner.Name != "" && !node {
		it.Owner = s.Owner
	}
	// A node record's Event: the Node it regards is the node.
	if s.Node != "" && !node {
		it.Node = s.Node
	}
	it.Impact, it.Worst, it.Vendors, it.Examples, it.Truncated = s.Impact, s.Worst, s.Vendors, s.Examples, s.Truncated
	if node {
		// An older forwarder posted the pod's wording.
		it.Vendors = catalog.NodeWords(it.Vendors)
	}
	it.Writer = wording.WriterLine(s.Writer)
	// Written by wording.ExecLine, read back from an Event: bounded again.
	it.Command = safetext.Cut(safetext.Display(s.Command), wording.MaxExecLine)
	// A look names the command that made it look, and says so; a
	// forwarder's before the field did not: a command's own Event with no
	// level is a failed command's (execLevel), so one with a command that
	// did not fail is a look's.
	it.Looked = it.Truncated || s.Looked || it.Worst == "" && it.Command != "" && !wording.FailedLine(it.Command)
	// The reason says the state; the summary only adds why.
	if state == findings.StateUnknown {
		it.Error = s.Error
	}
	return it, true
}

// ResolveOwners names each item's owner from the live cluster: the pod's
// workload when the pod the finding is about still exists (same UID, or the
// static pod's mirror), else the item keeps its own owner. Pods are looked
// up once each; an error other than NotFound stops the report, since a
// report with half its owners silently wrong would mislead.
func ResolveOwners(ctx context.Context, client kubernetes.Interface, items []Item) error {
	r := owner.New(client)
	type podKey struct{ ns, name string }
	pods := map[podKey]*corev1.Pod{}
	for i := range items {
		it := &items[i]
		k := podKey{it.Namespace, it.Pod}
		pod, ok := pods[k]
		// client-go refuses such names with an error that looks like an
		// outage; no pod can have them.
		if len(path.IsValidPathSegmentName(it.Namespace))+len(path.IsValidPathSegmentName(it.Pod)) > 0 || it.Namespace == "" || it.Pod == "" {
			continue
		}
		if !ok {
			p, err := client.CoreV1().Pods(it.Namespace).Get(ctx, it.Pod, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return fmt.Errorf("get pod %q: %w", it.Namespace+"/"+it.Pod, err)
			default:
				pod = p
			}
			pods[k] = pod
		}
		if pod == nil {
			continue
		}
		if string(pod.UID) == it.PodUID || pod.Annotations[owner.MirrorAnnotation] == it.PodUID {
			// As a failed pod GET: the nearest owner (the ReplicaSet)
			// would list the pod under another workload than its
			// Deployment's other pods.
			o, _, err := r.Reference(ctx, pod)
			if err != nil {
				return fmt.Errorf("owner of pod %q: %w", it.Namespace+"/"+it.Pod, err)
			}
			it.Owner = o
		}
	}
	return nil
}
