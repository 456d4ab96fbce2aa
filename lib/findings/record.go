package findings

import "time"

// Schema names the record layout; consumers refuse records of another schema.
// Within a schema fields are only ever added: a reader ignores the fields it
// does not know (encoding/json does), and a newer reader gives those an older
// writer left out their old meaning (KnownState). A new schema would make
// every older consumer skip every line.
const Schema = "iptables-alerter/v1"

// Record is one line of the findings file. Every field is always present in
// the JSON (no omitempty) so that log shippers and jq filters see one shape.
type Record struct {
	Schema string    `json:"schema"`
	Time   time.Time `json:"time"`
	Node   string    `json:"node"`
	// Subject is what the record is about: a pod (Pod, SandboxID and the
	// container fields name it) or the node's own network namespace (those
	// fields empty, Node names it); see KnownSubject.
	Subject     Subject `json:"subject"`
	Source      string  `json:"source"`
	Stage       string  `json:"stage"`
	ContainerID string  `json:"container_id"`
	SandboxID   string  `json:"sandbox_id"`
	Pod         Pod     `json:"pod"`
	Container   string  `json:"container"`
	Image       string  `json:"image"`
	Netns       string  `json:"netns"`
	// State says what the record tells of the pod's usage: present, gone
	// or unknown (see State). Consumers act on it, never on the counts.
	State  State  `json:"state"`
	Nft    Nft    `json:"nft"`
	Legacy Legacy `json:"legacy"`
	// Allowlisted counts the rules subtracted by the allowlist.
	Allowlisted      int       `json:"allowlisted"`
	AllowlistEntries []string  `json:"allowlist_entries"`
	Examples         []Example `json:"examples"`
	// ExamplesLeftOut counts per impact level the rules Examples does not
	// show (LeftOut); Encode keeps it true to the examples it writes.
	ExamplesLeftOut Impact `json:"examples_left_out"`
	// Impact counts the rules per RHEL 10 impact level, Worst is the worst
	// level counted ("" for none); see impact.go.
	Impact Impact `json:"impact"`
	Worst  string `json:"worst"`
	// Modules names per level the kernel modules its rules need
	// (modules.go); lists are empty in lines of older writers.
	Modules Modules `json:"modules"`
	// MixedBackends is true when the netns holds iptables rules in both
	// legacy x_tables and nftables (iptables-nft): a tool that reads one
	// backend does not see the other's rules. False in lines of older
	// writers (not known).
	MixedBackends bool `json:"mixed_backends"`
	// Vendors lists the known frameworks the rules match, at most
	// MaxVendors; empty when none matches.
	Vendors []Vendor `json:"vendors"`
	// Fingerprint is a stable hash of the usage: the same rules give the
	// same value whatever their counters, handles or the time of the check.
	Fingerprint string `json:"fingerprint"`
	// Truncated is true when the look did not see everything (the
	// deadline, the x_tables lock kept busy, a decoding bound): the
	// counts are a lower bound (Partial).
	Truncated bool `json:"truncated"`
	// ListsCut is true when lists (tables, examples, vendors, allowlist
	// entries) or strings were cut to bound the record: the counts are
	// whole, and the look says as much as an uncut one. Records before
	// the field set Truncated instead.
	ListsCut bool   `json:"lists_cut"`
	Error    string `json:"error"`
	// Writer names the process whose committed change made the agent's
	// watch scan, or that a start, stop or sweep scan saw while the watch
	// still held that commit; null when no watched commit explains the
	// record (the hook, a sweep) or the watch could not tell.
	Writer *Writer `json:"writer"`
	// Exec is the iptables command the agent's exec watch saw (see
	// exec.go): set on every record of source exec, and on a watch's
	// record whose commit came from a command it saw; null otherwise.
	Exec *Exec `json:"exec"`
}

// Writer is the process that committed an nftables generation, as the
// kernel announced it (pid and command) and the host's /proc described it
// when the announcement arrived. The command names are the pod's choice:
// bounded and escaped like every other string.
type Writer struct {
	// PID is in the host's pid namespace, whatever the writer's own.
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	// PPID and ParentComm are the writer's parent; 0 and "" when the
	// writer was gone.
	PPID       int    `json:"ppid"`
	ParentComm string `json:"parent_comm"`
	// ContainerID, Container and Pod place the writer: the container its
	// cgroup names, and that container's pod; empty when the cgroup names
	// no container the runtime knows (a host process).
	ContainerID string `json:"container_id"`
	Container   string `json:"container"`
	Pod         Pod    `json:"pod"`
	// Unit is the systemd unit of a host process, from its cgroup.
	Unit string `json:"unit"`
	// Gone is true when the process had exited before /proc could be
	// read: only PID and Comm (the kernel's) are known.
	Gone bool `json:"gone"`
}

// State is what a record says of its pod's iptables usage.
type State string

const (
	// StatePresent: usage was seen (counts, examples); with Truncated
	// they are a lower bound.
	StatePresent State = "present"
	// StateGone: usage recorded earlier is no longer there; consumers
	// clear the pod's result and metrics. The record holds no usage.
	StateGone State = "gone"
	// StateUnknown: the inspection could not finish and saw no usage, so
	// whether the pod uses iptables is not known (Error says why,
	// Truncated is set). Consumers show it as an error, never as clean.
	StateUnknown State = "unknown"
)

// States lists the values in the order the README gives them.
var States = []State{StatePresent, StateGone, StateUnknown}

// KnownState is the record's State when it is one of States; otherwise,
// for a line written before the field existed (or a value this reader does
// not know), what such a line meant: a record with usage is present, one
// without was only ever written for an inspection that could not finish,
// so unknown. Never gone: only a writer that knows the field says gone.
func (r Record) KnownState() State {
	switch r.State {
	case StatePresent, StateGone, StateUnknown:
		return r.State
	}
	if r.HasUsage() {
		return StatePresent
	}
	return StateUnknown
}

// Subject is what a record is about.
type Subject string

const (
	SubjectPod  Subject = "pod"
	SubjectNode Subject = "node"
)

// KnownSubject is the record's Subject, pod for a line written before the
// field existed (every such line was a pod's) or a value this reader does
// not know.
func (r Record) KnownSubject() Subject {
	if r.Subject == SubjectNode {
		return SubjectNode
	}
	return SubjectPod
}

// Pod identifies the pod as the kubelet labelled its containers.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Nft counts iptables-nft usage found in nftables.
type Nft struct {
	// Tables lists the iptables-shaped tables holding usage, as "family name".
	Tables []string `json:"tables"`
	// Chains counts the chains holding usage, Rules the usage rules left
	// after the allowlist: the rules the *-nft-save tools list as -A lines.
	Chains int `json:"chains"`
	Rules  int `json:"rules"`
	// PerTable counts, per table of Tables, the table's chains (the save
	// tool's ":" lines: base and user chains) and its usage rules; at most
	// maxList entries, in the order of Tables.
	PerTable []TableCount `json:"per_table"`
}

// TableCount is one table's counts in Nft.PerTable.
type TableCount struct {
	// Table is "family name", as in Nft.Tables.
	Table  string `json:"table"`
	Chains int    `json:"chains"`
	Rules  int    `json:"rules"`
}

// Legacy counts usage found in the kernel's legacy x_tables.
type Legacy struct {
	Tables []string `json:"tables"`
	Rules  int      `json:"rules"`
	// Examples holds, on the line only, the record's examples at level
	// legacy: a legacy table and an iptables-nft table share family and
	// name, so an example's place must say which holds the rule, and
	// readers that know only nftables examples (older consumers, scripts
	// comparing examples with the nft save tools) keep working. Encode
	// moves them here from Record.Examples and Parse moves them back,
	// worst first, so code sees one list; nil in memory.
	Examples []Example `json:"examples"`
}

// Example is one rule shown to the admin, in canonical iptables-save text.
type Example struct {
	Family string `json:"family"`
	Table  string `json:"table"`
	Chain  string `json:"chain"`
	Rule   string `json:"rule"`
	// Impact is the rule's RHEL 10 impact level (xt or native; "" when
	// not known).
	Impact string `json:"impact"`
}

// Time layout used in the file: RFC 3339 in UTC.
func Now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// HasUsage reports whether the record shows iptables usage; a record that
// only carries an inspection error does not.
func (r Record) HasUsage() bool { return r.Nft.Used() || r.Legacy.Used() }

// Partial tells a look that could not see everything: its state unknown,
// or its counts a lower bound (Truncated: the x_tables lock kept busy,
// the deadline, a bound). Rules it did not see may still be there, so a
// consumer keeps a worse level the pod had until a whole look: a pod seen
// with legacy rules that then keeps the lock busy must not look milder.
func (r Record) Partial() bool { return r.KnownState() == StateUnknown || r.Truncated }

// MilderThan tells a partial look whose worst level is milder than worst,
// the level an earlier look saw: that level stays.
func (r Record) MilderThan(worst string) bool {
	return r.Partial() && ImpactRank(worst) < ImpactRank(r.WorstLevel())
}

// CommandOnly tells a command's own finding: the exec watch's failed
// write or read, with the command and no rules. It says nothing of the
// pod's rules, so a consumer keeps what the pod's last look said; a
// write refused for missing kernel support (its Worst) is the RHEL 10
// breakage itself.
func (r Record) CommandOnly() bool { return r.Exec != nil && !r.HasUsage() }

// Used reports whether iptables-nft usage was found.
func (n Nft) Used() bool { return n.Rules > 0 || n.Chains > 0 || len(n.Tables) > 0 }

// Used reports whether legacy x_tables usage was found.
func (l Legacy) Used() bool { return l.Rules > 0 || len(l.Tables) > 0 }
