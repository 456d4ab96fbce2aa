package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
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

// ruleText renders a rule for allowlist matching and examples.
var ruleText = func(r inspect.Rule) string {
	names := make([]string, len(r.Exprs))
	for i, e := range r.Exprs {
		names[i] = e.Name
	}
	return "-A " + r.Chain + " [" + strings.Join(names, " ") + "]"
}

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
	res.Usage, res.Allowed = allow.Apply(res.Usage, namespace, ruleText)
	return res, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprint(err)
}
