package wording

import (
	"strconv"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// MaxWriterLine bounds WriterLine in bytes: one line of a note, a Report
// property (under lib/openreports' 256) and a report's detail.
const MaxWriterLine = 240

// shortID is how much of a container ID WriterLine shows when the
// container has no name: crictl's and podman's short form.
const shortID = 12

// WriterLine says in one line, escaped and bounded, which process made the
// change the agent's watch looked after: "iptables-nft-re (pid 4242,
// parent sh pid 4200) in container istio-init of pod shop/cart", or on the
// host in a systemd unit, or that it had exited before it could be placed.
// Every name is the process's or the pod's choice. Empty for nil.
func WriterLine(w *findings.Writer) string {
	if w == nil {
		return ""
	}
	comm := w.Comm
	if comm == "" {
		comm = "process"
	}
	var b strings.Builder
	b.WriteString(safetext.Display(comm) + " (pid " + strconv.Itoa(w.PID))
	if w.PPID > 0 {
		b.WriteString(", parent ")
		if w.ParentComm != "" {
			b.WriteString(safetext.Display(w.ParentComm) + " ")
		}
		b.WriteString("pid " + strconv.Itoa(w.PPID))
	}
	b.WriteString(")")
	switch {
	case w.Gone:
		b.WriteString(", exited before it could be placed")
	case w.Container != "" || w.Pod.Name != "":
		if w.Container != "" {
			b.WriteString(" in container " + safetext.Display(w.Container))
		}
		if w.Pod.Name != "" {
			b.WriteString(" of pod " + safetext.Display(w.Pod.Namespace) + "/" + safetext.Display(w.Pod.Name))
		}
	case w.ContainerID != "":
		b.WriteString(" in container " + safetext.Display(w.ContainerID[:min(len(w.ContainerID), shortID)]))
	case w.Unit != "":
		b.WriteString(" on the host, unit " + safetext.Display(w.Unit))
	default:
		b.WriteString(" on the host")
	}
	return safetext.Cut(b.String(), MaxWriterLine)
}
