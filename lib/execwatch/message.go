package execwatch

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Kernel constants (include/uapi/linux/connector.h, cn_proc.h).
const (
	netlinkConnector = 11 // NETLINK_CONNECTOR
	cnIdxProc        = 1  // CN_IDX_PROC: the group and the callback id
	cnValProc        = 1  // CN_VAL_PROC
	mcastListen      = 1  // PROC_CN_MCAST_LISTEN
	mcastIgnore      = 2  // PROC_CN_MCAST_IGNORE

	procEventNone = 0x00000000
	procEventExec = 0x00000002
	procEventExit = 0x80000000

	// cnMsgLen is struct cn_msg without its data: id (idx, val), seq,
	// ack, len, flags.
	cnMsgLen = 20
	// procEventHdr is struct proc_event up to event_data: what, cpu,
	// timestamp_ns.
	procEventHdr = 16
)

// Kind is what an Event reports.
type Kind int

const (
	KindOther Kind = iota
	// KindAck: the kernel's answer to a listen request (Err, Seq, Ack).
	KindAck
	KindExec
	KindExit
)

// Event is one decoded connector message.
type Event struct {
	Kind Kind
	// Seq and Ack are the cn_msg's: an acknowledgement answers the
	// request's ack plus one.
	Seq, Ack uint32
	// Err is an acknowledgement's error number (0: listening).
	Err uint32
	// PID and TGID are the thread and its thread group (process), in the
	// initial pid namespace.
	PID, TGID int
	// Status is an exit's raw wait status (see ExitStatus).
	Status uint32
}

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
	if len(b) < cnMsgLen {
		return Event{}, errShort
	}
	ne := binary.NativeEndian
	ev := Event{Seq: ne.Uint32(b[8:]), Ack: ne.Uint32(b[12:])}
	if ne.Uint32(b[0:]) != cnIdxProc || ne.Uint32(b[4:]) != cnValProc {
		return ev, nil
	}
	n := int(ne.Uint16(b[16:]))
	data := b[cnMsgLen:]
	if n > len(data) {
		return Event{}, errShort
	}
	data = data[:n]
	if len(data) < procEventHdr {
		return Event{}, errShort
	}
	what, d := ne.Uint32(data[0:]), data[procEventHdr:]
	switch what {
	case procEventNone:
		if len(d) < 4 {
			return Event{}, errShort
		}
		ev.Kind, ev.Err = KindAck, ne.Uint32(d)
	case procEventExec:
		if len(d) < 8 {
			return Event{}, errShort
		}
		ev.Kind, ev.PID, ev.TGID = KindExec, int(int32(ne.Uint32(d))), int(int32(ne.Uint32(d[4:])))
	case procEventExit:
		if len(d) < 12 {
			return Event{}, errShort
		}
		ev.Kind, ev.PID, ev.TGID = KindExit, int(int32(ne.Uint32(d))), int(int32(ne.Uint32(d[4:])))
		ev.Status = ne.Uint32(d[8:])
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
