package events

import (
	"encoding/json"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
)

// Summary is what an Event carries of its finding in SummaryAnnotation,
// so that `report` can group the cluster's Events by workload without the
// nodes' findings files. It is built from an encoded record, so it is as
// bounded as the record (4 KiB), well under the API's 256 KiB of
// annotations.
type Summary struct {
	Node  string      `json:"node"`
	Owner owner.Owner `json:"owner"`
	// Pod is the record's pod; the Event's regarding names the live one.
	Pod findings.Pod `json:"pod"`
	// State is the record's; Error says why when it is unknown. Summaries
	// of forwarders before the field have neither: their Events are all
	// of usage (Reason).
	State    findings.State     `json:"state"`
	Error    string             `json:"error"`
	Impact   findings.Impact    `json:"impact"`
	Worst    string             `json:"worst"`
	Vendors  []findings.Vendor  `json:"vendors"`
	Examples []findings.Example `json:"examples"`
	// Truncated is the record's: the look stopped early (the x_tables
	// lock kept busy, the deadline, a bound), so Impact and Worst are a
	// lower bound. False in summaries of forwarders before the field.
	Truncated bool `json:"truncated"`
	// Writer is the record's: the process whose change the agent's watch
	// looked after; null when none.
	Writer *findings.Writer `json:"writer"`
	// Command is the record's iptables command as wording.ExecLine says
	// it (FAILED first when it failed); "" when none.
	Command string `json:"command"`
	// Looked is set on a look at the rules that names a command (the
	// agent's scan after it): the command is beside the rules, not its
	// own finding, even FAILED and with no level (rules of none).
	// Summaries of forwarders before the field lack it; lib/report then
	// goes by the level.
	Looked bool `json:"looked,omitempty"`
}

// SummaryOf condenses rec as posted by node, the pod owned by o.
func SummaryOf(rec findings.Record, node string, o owner.Owner) Summary {
	if rec.Node != "" {
		node = rec.Node
	}
	return Summary{Node: node, Owner: o, Pod: rec.Pod, State: rec.KnownState(), Error: rec.Error, Impact: rec.Levels(), Worst: rec.WorstLevel(),
		Truncated: rec.Truncated, Vendors: rec.Vendors, Examples: rec.Examples, Writer: rec.Writer, Command: wording.ExecLine(rec.Exec),
		Looked: rec.Exec != nil && !rec.CommandOnly()}
}

// JSON encodes the summary; it cannot fail on these types.
func (s Summary) JSON() string {
	b, _ := json.Marshal(s)
	return string(b)
}
