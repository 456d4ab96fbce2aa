package main

import (
	"context"
	"fmt"

	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/render"
)

// scanResult is one pass of the data flow over a netns: inspect, classify,
// allowlist. Every subcommand that looks at a netns goes through scan.
type scanResult struct {
	Usage   classify.Usage
	Allowed allowlist.Result
	// NetnsID identifies the namespace (device:inode) while it lives; it
	// stands in for the sandbox id when the runtime gives none.
	NetnsID string
	// Err is an inspection error; the usage is then a lower bound.
	Err error
}

// maxExampleCandidates bounds how many remaining rules are rendered to pick
// the examples from: rendering costs, and the first rules tell enough.
const maxExampleCandidates = 64

// scan opens path and runs the data flow. An error opening the namespace is
// returned; errors after that are kept in the result with what was seen.
func scan(ctx context.Context, path, namespace string, allow *allowlist.List) (scanResult, error) {
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
			Table:  render.Escape(r.Table, maxNameInRecord),
			Chain:  render.Escape(r.Chain, maxNameInRecord),
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
