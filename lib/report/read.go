package report

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/modules"
)

// Inputs are what a report reads and how it judges what it read.
type Inputs struct {
	// Files are findings files; each one's rotated generations are read
	// too (FindingsFiles).
	Files []string
	// Events are saved `kubectl get events -A -o json` files.
	Events []string
	// Source is a Sources value; "" is SourceAuto.
	Source string
	// Namespace keeps one namespace, from every input; "" for all, or,
	// when the cluster is read and AllNamespaces is not set, the
	// namespace the kubeconfig context sets (Cluster.ContextNamespace),
	// as kubectl does.
	Namespace string
	// AllNamespaces reads every namespace whatever the context sets.
	AllNamespaces bool
	// Expectations is the expectations file, "" for none.
	Expectations string
	// Target is the RHEL 10 release the kernel package lines speak of,
	// "rhel-10.2" (modules.Table.Target); "" is the newest with verified
	// data.
	Target string
	// FailOn is a FailModes value; "" is FailNever.
	FailOn string
	// Connect gives the cluster, called only when one is read: the
	// cluster's Reports or Events when no file is given, the owners of the
	// files when Owners is set. Nil: no cluster (its error is then
	// "no credentials").
	Connect func() (Cluster, error)
	// Owners asks the cluster for the owners of the files' pods: set when
	// credentials were named, since a CI job's ~/.kube/config may be
	// another cluster's.
	Owners bool
}

// Check refuses inputs the Source does not read.
func (in Inputs) Check() error {
	given := len(in.Files) > 0 || len(in.Events) > 0
	switch in.Source {
	case SourceReports, SourceEvents:
		if given {
			return errors.New("reads the cluster only: drop the findings files and --events, or use --source files")
		}
	case SourceFiles:
		if !given {
			return errors.New("name findings files or --events FILE")
		}
	}
	return nil
}

// Read reads the inputs in order (findings files, saved Events, the
// cluster), groups what they say by workload and judges it: the report
// the writers render. The cluster is read when no file is given (and
// Source is not files), and asked for owners when one is and Owners is
// set.
func Read(ctx context.Context, in Inputs) (Report, error) {
	if err := in.Check(); err != nil {
		return Report{}, fmt.Errorf("--source %s: %w", in.Source, err)
	}
	target, err := modules.Releases.Target(in.Target)
	if err != nil {
		return Report{}, fmt.Errorf("--target: %w", err)
	}
	var exps []Expectation
	if in.Expectations != "" {
		var err error
		if exps, err = LoadExpectations(in.Expectations); err != nil {
			return Report{}, err
		}
	}
	var (
		items []Item
		col   *collector
		sk    Skipped
	)
	origin := Origin{Namespace: in.Namespace, Time: time.Now()}
	paths, err := FindingsFiles(in.Files)
	if err != nil {
		return Report{}, err
	}
	for _, p := range paths {
		its, err := ReadFindings(p, &sk)
		if err != nil {
			return Report{}, err
		}
		items = append(items, its...)
	}
	if len(paths) > 0 {
		origin.From = append(origin.From, "files")
	}
	for _, p := range in.Events {
		its, err := readEventsFile(p, &sk)
		if err != nil {
			return Report{}, err
		}
		items = append(items, its...)
	}
	if len(in.Events) > 0 {
		origin.From = append(origin.From, "events-file")
	}
	items = InNamespace(items, in.Namespace)
	fromCluster := len(in.Files) == 0 && len(in.Events) == 0 && in.Source != SourceFiles
	if fromCluster || in.Owners {
		if in.Connect == nil {
			return Report{}, errors.New("read cluster: no credentials")
		}
		cl, err := in.Connect()
		if err != nil {
			return Report{}, err
		}
		origin.Cluster, origin.Context = cl.Config.Host, cl.Context
		ns := in.Namespace
		if fromCluster && ns == "" && !in.AllNamespaces && cl.ContextNamespace != "" {
			if err := CheckNamespace(cl.ContextNamespace); err != nil {
				return Report{}, fmt.Errorf("namespace of context %q: %w", cl.Context, err)
			}
			ns, cl.Namespace, origin.Namespace = cl.ContextNamespace, cl.ContextNamespace, cl.ContextNamespace
		}
		if fromCluster {
			// No file was read: the cluster's items are grouped as they
			// come, never held all at once.
			col = newCollector(ns, exps)
			from, err := ReadCluster(ctx, cl, SourcesOf(in.Source), &sk, col.add)
			if err != nil {
				return Report{}, err
			}
			origin.From = append(origin.From, from...)
		} else {
			if err := ResolveOwners(ctx, cl.Client, items); err != nil {
				return Report{}, err
			}
			origin.From = append(origin.From, "owners from the cluster")
		}
	}
	failOn := in.FailOn
	if failOn == "" {
		failOn = FailNever
	}
	r := Report{Origin: origin, Skipped: sk, FailOn: failOn, Target: target}
	if col != nil {
		r.Groups = col.groups()
	} else {
		r.Groups = GroupItems(items, exps)
	}
	for i := range r.Groups {
		r.Groups[i].Kernel = modules.Releases.Words(target, r.Groups[i].Modules)
	}
	r.Failing = Judge(r.Groups, failOn)
	return r, nil
}

// readEventsFile reads a saved events file (ReadEvents).
func readEventsFile(path string, sk *Skipped) ([]Item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open events: %w", err)
	}
	defer f.Close()
	return ReadEvents(f, path, sk)
}
