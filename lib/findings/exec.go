package findings

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
)

// SourceExec is the source of the records of the agent's exec watch: an
// iptables tool that ran (Record.Exec says which, and how it ended).
const SourceExec = "exec"

// Exec is the iptables command a record is about: the command that made
// the agent look (a legacy write, whose record then counts the rules as
// any scan's), that the nftables watch's commit came from (joined to its
// Writer), or that a record of its own reports (a failed write, a read).
// The command line is the pod's: bounded and escaped like every string.
type Exec struct {
	// Argv is the command line, at most maxList arguments of maxField
	// bytes; ArgvCut tells that something was left out.
	Argv    []string `json:"argv"`
	ArgvCut bool     `json:"argv_cut"`
	// Binary is the executed file; Tool the name it ran as (argv[0]'s
	// base name: the multi binaries dispatch on it).
	Binary string `json:"binary"`
	Tool   string `json:"tool"`
	// Backend is legacy or nft, from the binary.
	Backend string `json:"backend"`
	// Operation is write, read, save or restore; Command the option that
	// chose it ("-A", "--check"; "" for save and restore).
	Operation string `json:"operation"`
	Command   string `json:"command"`
	// Table and Chain are what argv names ("filter" when it names no
	// table; "" for a save without -t and a restore without -T).
	Table string `json:"table"`
	Chain string `json:"chain"`
	// Exited tells that the exit was seen: ExitCode, or Signal when a
	// signal ended it. False when the record was made before the exit (a
	// commit the nftables watch heard) or the exit was not seen.
	Exited   bool `json:"exited"`
	ExitCode int  `json:"exit_code"`
	Signal   int  `json:"signal"`
	// Failed marks a write that did not work: it exited non-zero (other
	// than 1 from -C or -D, an answer) or was killed. The record holds no
	// rules (a legacy restore, which commits table by table, or a killed
	// legacy write may have made some: the scan that follows has its own
	// record). Old readers see a present record without counts.
	Failed bool `json:"failed"`
	// MissingKernelSupport: the failure is the one a node without the
	// kernel's tables or extensions gives (exit 3, VERSION_PROBLEM: "can't
	// initialize iptables table"; exit 4 from iptables-nft,
	// RESOURCE_PROBLEM: "Extension X revision 0 not supported"; a legacy
	// write that failed on a kernel without its family's x_tables module):
	// the breakage a RHEL 10 node produces. Record.Worst is then set.
	MissingKernelSupport bool `json:"missing_kernel_support"`
	// NoNetAdmin: the process ran without CAP_NET_ADMIN, which every
	// table needs: its refusal (exit 3 or 4, "Permission denied") is no
	// missing kernel support. False when not known.
	NoNetAdmin bool `json:"no_net_admin,omitempty"`
}

// Failed tells whether the record reports a failed iptables write.
func (r Record) Failed() bool { return r.Exec != nil && r.Exec.Failed }

// CommandLine is the command as one line for a person: the arguments
// quoted where needed, at most max bytes.
func (e *Exec) CommandLine(max int) string {
	if e == nil {
		return ""
	}
	parts := make([]string, 0, len(e.Argv)+1)
	for _, a := range e.Argv {
		if plainArg(a) {
			parts = append(parts, a)
		} else {
			parts = append(parts, safetext.Quote(a, maxField))
		}
	}
	if e.ArgvCut {
		parts = append(parts, safetext.Ellipsis)
	}
	return safetext.Cut(strings.Join(parts, " "), max)
}

// plainArg: an argument shown bare, options included; anything else
// (spaces, quotes, control or non-ASCII characters, empty) is quoted.
func plainArg(a string) bool {
	if a == "" || len(a) > maxField {
		return false
	}
	for _, c := range []byte(a) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.-:+@/,=%!", c) >= 0) {
			return false
		}
	}
	return true
}

// Status is the exit in a few words: "exit 0", "signal 9", "running".
func (e *Exec) Status() string {
	switch {
	case e == nil:
		return ""
	case !e.Exited:
		return "exit not seen"
	case e.Signal != 0:
		return "signal " + strconv.Itoa(e.Signal)
	}
	return "exit " + strconv.Itoa(e.ExitCode)
}

// ShapeFingerprint identifies the command's shape, never its values: the
// tool, operation, command option, table and chain, and for a failure its
// status. The exec watch records a read or a failure once per pod and
// shape with it, within the pod's limit for all its commands: table and
// chain are the pod's to choose.
func (e *Exec) ShapeFingerprint() string {
	h := sha256.New()
	for _, s := range []string{"exec", e.Tool, e.Backend, e.Operation, e.Command, e.Table, e.Chain, strconv.FormatBool(e.Failed), e.Status()} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// bound cuts e's strings and argv to their bounds, on a copy.
func (e *Exec) bound() *Exec {
	if e == nil {
		return nil
	}
	c := *e
	c.Argv = make([]string, 0, min(len(e.Argv), maxList))
	for _, a := range e.Argv[:min(len(e.Argv), maxList)] {
		c.Argv = append(c.Argv, safetext.Cut(a, maxField))
	}
	if len(e.Argv) > maxList {
		c.ArgvCut = true
	}
	return &c
}
