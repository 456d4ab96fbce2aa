package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/modules"
)

// Member is one cluster of a report over several (a fleet): the
// kubeconfig context that names it and how to reach it.
type Member struct {
	Name    string
	Connect func() (Cluster, error)
}

// ClusterRead says what became of one cluster of a report over several:
// what it was read from, or why it could not be read.
type ClusterRead struct {
	// Name is the kubeconfig context: the Cluster of its groups.
	Name string `json:"name"`
	// Origin is the cluster's own header, zero when it was not read.
	Origin Origin `json:"origin,omitzero"`
	// Groups counts its workloads in the report.
	Groups int `json:"groups"`
	// Error says why the cluster could not be read, "" when it was: its
	// workloads are then missing from the report, which is not complete.
	Error string `json:"error,omitempty"`
}

// fleetParallel bounds the clusters read at once: each holds its Items
// until they are grouped.
const fleetParallel = 4

// ReadFleet reads each member's cluster as Read reads one (in with the
// member's Connect), each within timeout and a few at a time, so that one
// cluster that does not answer costs its own timeout and no other's. The
// report merges them: each group names its Cluster, Clusters lists every
// member in the order given with its origin or its error, and a member
// that could not be read leaves the others reported (Unread). Findings
// files and saved Events are one cluster's: they are refused here.
func ReadFleet(ctx context.Context, in Inputs, members []Member, timeout time.Duration) (Report, error) {
	if len(members) == 0 {
		return Report{}, errors.New("read clusters: no kubeconfig context to read")
	}
	if len(in.Files) > 0 || len(in.Events) > 0 || in.Source == SourceFiles {
		return Report{}, errors.New("several clusters: findings files and --events are one cluster's; read them with one --context")
	}
	seen := map[string]bool{}
	for _, m := range members {
		if seen[m.Name] {
			return Report{}, fmt.Errorf("several clusters: context %q named twice", m.Name)
		}
		seen[m.Name] = true
	}
	// What is wrong for every cluster is one error, not one per cluster.
	if err := in.Check(); err != nil {
		return Report{}, fmt.Errorf("--source %s: %w", in.Source, err)
	}
	target, err := modules.Releases.Target(in.Target)
	if err != nil {
		return Report{}, fmt.Errorf("--target: %w", err)
	}
	if in.Expectations != "" {
		if _, err := LoadExpectations(in.Expectations); err != nil {
			return Report{}, err
		}
	}
	reads := make([]Report, len(members))
	errs := make([]error, len(members))
	sem := make(chan struct{}, fleetParallel)
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			one := in
			one.Connect, one.Owners = m.Connect, false
			reads[i], errs[i] = Read(cctx, one)
		}()
	}
	wg.Wait()

	failOn := in.FailOn
	if failOn == "" {
		failOn = FailNever
	}
	r := Report{Origin: Origin{Namespace: in.Namespace, Time: time.Now()}, Groups: []Group{}, FailOn: failOn, Target: target}
	for i, m := range members {
		cr := ClusterRead{Name: m.Name}
		if errs[i] != nil {
			cr.Error = errs[i].Error()
			r.Clusters = append(r.Clusters, cr)
			continue
		}
		one := reads[i]
		cr.Origin, cr.Groups = one.Origin, len(one.Groups)
		r.Clusters = append(r.Clusters, cr)
		for _, f := range one.Origin.From {
			if !slices.Contains(r.Origin.From, f) {
				r.Origin.From = append(r.Origin.From, f)
			}
		}
		for _, g := range one.Groups {
			g.Cluster = m.Name
			r.Groups = append(r.Groups, g)
		}
		r.Skipped.Malformed += one.Skipped.Malformed
		r.Skipped.Invalid += one.Skipped.Invalid
		r.Skipped.Cut += one.Skipped.Cut
		r.Skipped.GoneNodes += one.Skipped.GoneNodes
		r.Skipped.CutUnseen += one.Skipped.CutUnseen
		for _, ns := range one.Skipped.CutUnseenIn {
			r.Skipped.CutUnseenIn = append(r.Skipped.CutUnseenIn, fmt.Sprintf("%s (context %s)", ns, m.Name))
		}
	}
	sortGroups(r.Groups)
	r.Failing = Judge(r.Groups, failOn)
	return r, nil
}

// Fleet reports whether r is a report over several clusters: its groups
// name their cluster, and every format shows a CLUSTER column.
func (r Report) Fleet() bool { return len(r.Clusters) > 0 }

// Unread are the clusters of a fleet report that could not be read: while
// there is one, the report is not complete, and never "clean".
func (r Report) Unread() []ClusterRead {
	var out []ClusterRead
	for _, c := range r.Clusters {
		if c.Error != "" {
			out = append(out, c)
		}
	}
	return out
}

// HeaderLines are the header of every format, plain text for the writers
// to escape: the Origin's line, and for a fleet one line per cluster
// after it, saying what it was read from or why it could not be.
func (r Report) HeaderLines() []string {
	if r.Origin.Time.IsZero() {
		return nil
	}
	if !r.Fleet() {
		return []string{r.Origin.Line()}
	}
	names := make([]string, len(r.Clusters))
	for i, c := range r.Clusters {
		names[i] = c.Name
	}
	head := fmt.Sprintf("Report of %d clusters (contexts %s)", len(r.Clusters), strings.Join(names, ", "))
	if r.Origin.Namespace != "" {
		head += ", namespace " + r.Origin.Namespace
	}
	lines := []string{safetext.Display(fmt.Sprintf("%s, at %s.", head, r.Origin.Time.UTC().Format(time.RFC3339)))}
	for _, c := range r.Clusters {
		lines = append(lines, c.Line())
	}
	return lines
}

// Line says in one line what became of the cluster.
func (c ClusterRead) Line() string {
	if c.Error != "" {
		return safetext.Display(fmt.Sprintf("%s: NOT READ, its workloads are missing: %s", c.Name, c.Error))
	}
	return safetext.Display(fmt.Sprintf("%s: %d workloads; %s", c.Name, c.Groups, c.Origin.Line()))
}

// unreadWords is the summary's line for the clusters not read, "" when
// every one was.
func unreadWords(r Report) string {
	unread := r.Unread()
	if len(unread) == 0 {
		return ""
	}
	names := make([]string, len(unread))
	for i, c := range unread {
		names[i] = c.Name
	}
	return safetext.Display(fmt.Sprintf("Not complete: %d of %d clusters could not be read (%s): their workloads are missing.",
		len(unread), len(r.Clusters), strings.Join(names, ", ")))
}
