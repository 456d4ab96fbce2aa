package report

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Read owns the input order: findings files, then saved Events, then the
// cluster, which is asked only when no file is given or owners are wanted;
// the Source refuses inputs it does not read, and the verdict follows
// FailOn.
func TestRead(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "findings.jsonl")
	rec := findings.Record{Time: t0, Pod: findings.Pod{Namespace: "shop", Name: "db-0", UID: "u1"}, State: findings.StatePresent,
		Legacy: findings.Legacy{Tables: []string{"filter"}, Rules: 1}, Fingerprint: "f"}
	if err := (findings.Log{Path: file}).Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	sum := events.Summary{State: findings.StatePresent, Impact: findings.Impact{Native: 1}, Worst: findings.ImpactNative}
	list, _ := json.Marshal(map[string]any{"kind": "EventList", "items": []any{map[string]any{
		"metadata": map[string]any{"namespace": "ops", "annotations": map[string]string{events.SummaryAnnotation: sum.JSON()}},
		"reason":   events.Reason, "reportingController": events.Controller,
		"regarding": map[string]any{"kind": "Pod", "namespace": "ops", "name": "probe", "uid": "u2"}}}})
	saved := writeFile(t, "events.json", string(list))

	connected := 0
	noCluster := func() (Cluster, error) { connected++; return Cluster{}, errors.New("no cluster here") }

	r, err := Read(ctx, Inputs{Files: []string{file}, Events: []string{saved}, Connect: noCluster, FailOn: FailBreaks})
	if err != nil || connected != 0 {
		t.Fatalf("files and events: %v, connected %d times", err, connected)
	}
	var owners []string
	for _, g := range r.Groups {
		owners = append(owners, g.Namespace+"/"+g.Owner.String())
	}
	if !slices.Equal(r.Origin.From, []string{"files", "events-file"}) || !slices.Equal(owners, []string{"shop/Pod/db-0", "ops/Pod/probe"}) ||
		!r.Failing || r.FailOn != FailBreaks || r.Origin.Time.IsZero() {
		t.Errorf("report from %v, groups %v, failing %v under %q", r.Origin.From, owners, r.Failing, r.FailOn)
	}
	if r, err := Read(ctx, Inputs{Files: []string{file}, Namespace: "ops"}); err != nil || len(r.Groups) != 0 || r.FailOn != FailNever {
		t.Errorf("namespace ops: %v, %+v", err, r)
	}

	// The cluster: read when nothing is given, asked for owners when
	// wanted, never under --source files.
	for _, in := range []Inputs{{Connect: noCluster}, {Files: []string{file}, Owners: true, Connect: noCluster}} {
		connected = 0
		if _, err := Read(ctx, in); err == nil || !strings.Contains(err.Error(), "no cluster here") || connected != 1 {
			t.Errorf("%+v: %v, connected %d times", in, err, connected)
		}
	}
	for _, c := range []struct {
		in   Inputs
		want string
	}{
		{Inputs{Source: SourceFiles}, "--source files: name findings files"},
		{Inputs{Source: SourceEvents, Files: []string{file}}, "--source events: reads the cluster only"},
		{Inputs{Source: SourceReports, Events: []string{saved}}, "--source reports: reads the cluster only"},
		{Inputs{Files: []string{file}, Expectations: filepath.Join(t.TempDir(), "missing.yaml")}, "missing.yaml"},
	} {
		connected = 0
		c.in.Connect = noCluster
		if _, err := Read(ctx, c.in); err == nil || !strings.Contains(err.Error(), c.want) || connected != 0 {
			t.Errorf("%+v: %v (want %q), connected %d times", c.in, err, c.want, connected)
		}
	}
}
