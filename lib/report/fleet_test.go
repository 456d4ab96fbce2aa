package report

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// ReadFleet refuses what is one cluster's, and a context named twice,
// before reading anything; a cluster that cannot be reached is one
// ClusterRead with its error, in the order given, the others kept.
func TestReadFleetRefusesAndNamesUnread(t *testing.T) {
	down := func() (Cluster, error) {
		return Cluster{}, errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	}
	ctx := context.Background()
	for _, tc := range []struct {
		in      Inputs
		members []Member
	}{
		{Inputs{Files: []string{"findings.jsonl"}}, []Member{{"a", down}, {"b", down}}},
		{Inputs{Events: []string{"events.json"}}, []Member{{"a", down}}},
		{Inputs{Source: SourceFiles}, []Member{{"a", down}}},
		{Inputs{}, []Member{{"a", down}, {"a", down}}},
		{Inputs{}, nil},
		{Inputs{Target: "rhel-9"}, []Member{{"a", down}}},
	} {
		if _, err := ReadFleet(ctx, tc.in, tc.members, time.Minute); err == nil {
			t.Errorf("ReadFleet(%+v, %d members): no error", tc.in, len(tc.members))
		}
	}
	r, err := ReadFleet(ctx, Inputs{FailOn: FailBreaks}, []Member{{"west", down}, {"east", down}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Clusters) != 2 || r.Clusters[0].Name != "west" || r.Clusters[1].Name != "east" || len(r.Unread()) != 2 ||
		!strings.Contains(r.Clusters[0].Error, "connection refused") || r.Failing || len(r.Groups) != 0 {
		t.Errorf("two clusters down: %+v", r)
	}
}

// A fleet report's every format names each group's cluster and each
// cluster not read; the text still fits its width and the Markdown rows
// their cells.
func TestFleetWriters(t *testing.T) {
	g := func(cluster, name, worst string) Group {
		return Group{Cluster: cluster, Namespace: "shop", Owner: owner.Owner{Kind: "Deployment", Name: name}, Pods: []string{name + "-1"},
			Nodes: []string{"node-a"}, Worst: worst, State: findings.StatePresent, Fails: true}
	}
	gs := []Group{g("west", "db", findings.ImpactXt), g("east", "web", findings.ImpactLegacy)}
	sortGroups(gs)
	if gs[0].Cluster != "east" {
		t.Errorf("sortGroups: %s first, want east's legacy group", gs[0].Cluster)
	}
	r := Report{Origin: Origin{Time: t0}, Groups: gs, FailOn: FailBreaks, Failing: true, Clusters: []ClusterRead{
		{Name: "east", Groups: 1, Origin: Origin{Cluster: "https://east:6443", Context: "east", From: []string{"reports"}, Time: t0}},
		{Name: "down\x1b[2J", Error: "dial tcp: connection refused"},
		{Name: "west", Groups: 1, Origin: Origin{Cluster: "https://west:6443", Context: "west", From: []string{"events"}, Time: t0}},
	}}
	for _, f := range Formats {
		var b bytes.Buffer
		if err := Write(&b, r, f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out := b.String()
		if strings.Contains(out, "\x1b") || !strings.Contains(out, "down") || !strings.Contains(out, "east") || !strings.Contains(out, "west") {
			t.Errorf("%s: a cluster missing, or its name not escaped:\n%s", f, out)
		}
		switch f {
		case "text":
			for _, l := range strings.Split(out, "\n") {
				if len([]rune(l)) > TextWidth {
					t.Errorf("text line over %d: %q", TextWidth, l)
				}
			}
			if !strings.Contains(out, "Not complete: 1 of 3 clusters could not be read") || !strings.HasPrefix(out, "Report of 3 clusters (contexts east, down") {
				t.Errorf("text: no fleet header or no summary of the cluster not read:\n%s", out)
			}
		case "markdown":
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "|") && strings.Count(l, "|")-strings.Count(l, `\|`) != len(header)+2 {
					t.Errorf("markdown row of other than %d cells: %q", len(header)+1, l)
				}
			}
		case "junit":
			if !strings.Contains(out, `errors="1"`) || !strings.Contains(out, "ClusterNotRead") || !strings.Contains(out, `classname="east/shop"`) {
				t.Errorf("junit: the cluster not read is no error, or no cluster in the classname:\n%s", out)
			}
		}
	}
	// One cluster: the formats as they were, without the column.
	r.Clusters = nil
	for _, g := range r.Groups {
		if cells := columns(g, r.Fleet(), mdEscape); len(cells) != len(header) {
			t.Errorf("one cluster: %d cells, want %d", len(cells), len(header))
		}
	}
}
