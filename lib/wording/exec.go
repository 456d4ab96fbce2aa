package wording

import (
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// NoNetAdmin says why a command run without CAP_NET_ADMIN failed.
const NoNetAdmin = "no CAP_NET_ADMIN: permission denied"

// MaxExecLine bounds ExecLine in bytes, as MaxWriterLine does a writer's.
const MaxExecLine = 240

// FailedMark starts the line of a command that failed: every consumer
// shows it first, where no one can miss it.
const FailedMark = "FAILED"

// FailedLine tells whether an ExecLine is a failed command's. Its mark
// is followed by " (": a command line that merely starts with a word
// FAILED (a binary of that name) cannot have it, as CommandLine quotes
// an argument holding a space or a parenthesis.
func FailedLine(line string) bool { return strings.HasPrefix(line, FailedMark+" (") }

// ExecLine says in one line, escaped and bounded, which iptables command
// the exec watch saw and how it ended: "FAILED (exit 3, missing kernel
// support): iptables-legacy -t nat -A ..." or "iptables-legacy -A ...
// (exit 0)"; "" for none. The command line is the pod's: CommandLine
// quotes what is not a plain word.
func ExecLine(e *findings.Exec) string {
	if e == nil {
		return ""
	}
	cmd := e.CommandLine(MaxExecLine)
	why := e.Status()
	if e.NoNetAdmin && e.Exited && (e.ExitCode != 0 || e.Signal != 0) {
		// Why the kernel refused it, on any node.
		why += ", " + NoNetAdmin
	}
	if !e.Failed {
		return safetext.Cut(cmd+" ("+why+")", MaxExecLine)
	}
	if e.MissingKernelSupport {
		why += ", missing kernel support"
	}
	return safetext.Cut(FailedMark+" ("+why+"): "+cmd, MaxExecLine)
}
