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

// The kernel line: the modules a workload's breaking rules need, judged
// against the --target release's table; native nft_* modules are not
// judged; an unknown target is refused. A pod with rules in both backends
// says so.
func TestReadTarget(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "findings.jsonl")
	rec := findings.Record{Time: t0, Pod: findings.Pod{Namespace: "mesh", Name: "app-0", UID: "u1"}, State: findings.StatePresent,
		Nft: findings.Nft{Tables: []string{"ip nat"}, Rules: 2, Chains: 1}, Impact: findings.Impact{Xt: 1, Native: 1}, Worst: findings.ImpactXt,
		Modules:       findings.Modules{Xt: []string{"nf_tables", "nft_chain_nat", "nft_compat", "xt_owner"}, Native: []string{"nf_tables", "nft_ct"}},
		MixedBackends: true, Fingerprint: "f"}
	if err := (findings.Log{Path: file}).Append(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]string{
		"":          "RHEL 10.2: needs kernel-modules-extra: nft_compat; package unverified: xt_owner",
		"rhel-10.2": "RHEL 10.2: needs kernel-modules-extra: nft_compat; package unverified: xt_owner",
		"rhel-10.1": "RHEL 10.1: package unverified: nft_compat (reported in kernel-modules-core), xt_owner",
	} {
		r, err := Read(ctx, Inputs{Files: []string{file}, Target: target})
		if err != nil || len(r.Groups) != 1 {
			t.Fatalf("target %q: %v, %+v", target, err, r)
		}
		g := r.Groups[0]
		if g.Kernel != want || !slices.Equal(g.Modules, []string{"nft_compat", "xt_owner"}) {
			t.Errorf("target %q: kernel %q modules %v, want %q", target, g.Kernel, g.Modules, want)
		}
		var b strings.Builder
		if err := Write(&b, r, "text"); err != nil || !strings.Contains(b.String(), "kernel:   "+want[:40]) ||
			!g.MixedBackends || !strings.Contains(b.String(), "backends: mixed: rules in both legacy") {
			t.Errorf("target %q: text %v:\n%s", target, err, b.String())
		}
	}
	if _, err := Read(ctx, Inputs{Files: []string{file}, Target: "rhel-9.6"}); err == nil || !strings.Contains(err.Error(), "--target") {
		t.Errorf("target rhel-9.6: %v", err)
	}
}
