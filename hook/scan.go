package main

import (
	"context"
	"fmt"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/render"
)

// scanResult is one pass of the data flow over a netns: inspect, classify,
// allowlist.
type scanResult struct {
	Usage   classify.Usage
	Allowed allowlist.Result
	// NetnsID identifies the namespace (device:inode) while it lives; it
	// stands in for the sandbox id when the runtime gives none.
	NetnsID string
	// Err is an inspection error; the usage is then a lower bound.
	Err error
	// AllowErr is the allowlist's load error; usage is then reported with
	// what could be loaded (the built-in entries).
	AllowErr error
}

// maxExampleCandidates bounds how many remaining rules are rendered to pick
// the examples from: rendering costs, and the first rules tell enough.
const maxExampleCandidates = 64

// scan opens path and runs the data flow. An error opening the namespace is
// returned; errors after that are kept in the result with what was seen.
//
// The allowlist is loaded only when there is usage to subtract from: most
// pods have none, and compiling its expressions is a fifth of the work.
func scan(ctx context.Context, path, namespace string, loadAllow func() (*allowlist.List, error)) (scanResult, error) {
	h, err := netns.Open(path)
	if err != nil {
		return scanResult{}, err
	}
	defer h.Close()
	var res scanResult
	if id, err := h.ID(); err == nil {
		res.NetnsID = id
	}
	snap, err := inspect.Inspect(ctx, h, inspect.Options{Detail: classify.Candidate})
	res.Err = err
	res.Usage = classify.Classify(snap)
	if res.Usage.Empty() {
		return res, nil
	}
	allow, err := loadAllow()
	res.AllowErr = err
	res.Usage, res.Allowed = allow.Apply(res.Usage, namespace, render.Text)
	return res, nil
}

// examples renders the remaining usage rules an admin should see first.
func examples(u classify.Usage) []findings.Example {
	rules := u.Rules
	if len(rules) > maxExampleCandidates {
		rules = rules[:maxExampleCandidates]
	}
	all := make([]findings.Example, 0, len(rules))
	for _, r := range rules {
		all = append(all, findings.Example{
			Family: string(r.Family),
			Table:  safetext.Name(r.Table, maxNameInRecord),
			Chain:  safetext.Name(r.Chain, maxNameInRecord),
			Rule:   render.Text(r),
		})
	}
	return findings.PickExamples(all)
}

// maxNameInRecord caps table and chain names (attacker-chosen) in examples.
const maxNameInRecord = 64

func errString(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprint(err)
}
