package execwatch

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/execquiet"
)

// Kernel constants (include/uapi/linux/connector.h, cn_proc.h); the
// messages' own are execquiet's, whose quiet path reads them in a system
// call of the runtime's.
const (
	netlinkConnector = 11 // NETLINK_CONNECTOR
	cnIdxProc        = execquiet.CnIdxProc
	cnValProc        = execquiet.CnValProc
	mcastListen      = 1 // PROC_CN_MCAST_LISTEN
	mcastIgnore      = 2 // PROC_CN_MCAST_IGNORE

	procEventNone = execquiet.ProcEventNone
	procEventExec = execquiet.ProcEventExec
	procEventExit = execquiet.ProcEventExit
	cnMsgLen      = execquiet.CnMsgLen
	procEventHdr  = execquiet.ProcEventHdr
)

// Kind is what an Event reports.
type Kind = execquiet.Kind

const (
	KindOther = execquiet.KindOther
	// KindAck: the kernel's answer to a listen request (Err, Seq, Ack).
	KindAck  = execquiet.KindAck
	KindExec = execquiet.KindExec
	KindExit = execquiet.KindExit
)

// Event is one decoded connector message (its Status: see ExitStatus).
type Event = execquiet.Event

var errShort = errors.New("connector message too short")

// listenRequest is the cn_msg payload asking the kernel for events. With
// events 0 it is the 4-byte PROC_CN_MCAST_LISTEN every kernel since 2.6.15
// takes, for every event; else a struct proc_input (the operation, then
// the events wanted), which kernels 6.6 and later take and older ones
// ignore without an ack (their length check wants 4 bytes).
func listenRequest(seq, ack uint32, op uint32, events uint32) []byte {
	n := 4
	if events != 0 {
		n = 8
	}
	b := make([]byte, cnMsgLen+n)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], cnIdxProc)
	ne.PutUint32(b[4:], cnValProc)
	ne.PutUint32(b[8:], seq)
	ne.PutUint32(b[12:], ack)
	ne.PutUint16(b[16:], uint16(n))
	ne.PutUint32(b[cnMsgLen:], op)
	if events != 0 {
		ne.PutUint32(b[cnMsgLen+4:], events)
	}
	return b
}

// wanted is the filter the watch asks for: execs and exits, not the fork
// of every process and thread, nor id, sid, comm and ptrace changes. On a
// busy node forks are as many as execs and exits together (a thread is a
// fork too), each a wake-up of the reader.
const wanted = procEventExec | procEventExit

// Decode reads one netlink message's payload (a cn_msg holding a
// proc_event), in the host's byte order. A message of another connector
// callback, or an event this watch does not use, is KindOther.
func Decode(b []byte) (Event, error) {
	ev, ok := execquiet.Parse(b)
	if !ok {
		return Event{}, errShort
	}
	return ev, nil
}

// ExitStatus decodes a raw wait status as the kernel's exit event carries
// it (task->exit_code): the exit code in bits 8-15 when the process exited,
// else the signal that ended it in the low 7 bits.
func ExitStatus(raw uint32) (code, signal int) {
	if sig := int(raw & 0x7f); sig != 0 {
		return 0, sig
	}
	return int(raw>>8) & 0xff, 0
}

// filterKernel reports whether a kernel release (uname -r) is 6.6 or later,
// whose connector takes an event filter with the listen request.
func filterKernel(release string) bool {
	var major, minor int
	if n, _ := fmt.Sscanf(release, "%d.%d", &major, &minor); n != 2 {
		return false
	}
	return major > 6 || major == 6 && minor >= 6
}

// release is the running kernel's release, "" when unknown.
func release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
