package execwatch

import (
	"encoding/binary"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Offsets in a connector datagram as the socket filter sees it: the
// netlink header, then the cn_msg, then the proc_event (what, cpu,
// timestamp, then the event's pid and tgid).
const (
	offIdx  = unix.NLMSG_HDRLEN
	offWhat = unix.NLMSG_HDRLEN + cnMsgLen
	offPID  = offWhat + procEventHdr
	offTGID = offPID + 4
)

// eventFilter is the socket filter of the connector's socket: it passes
// execs, exits of a thread group (pid = tgid), acknowledgements (events
// of kind none) while acks is set, and anything not a process event (the reader drops what
// the kernel did not send), and drops every other process event in the
// kernel, before it is queued: forks, id, sid, comm, ptrace and coredump
// events, and the exits of threads. Kernels before 6.6 (RHEL 9's 5.14)
// take no filter with the listen request and send them all, and one
// unprivileged process can send hundreds of thousands a second (a loop
// of prctl(PR_SET_NAME), each announced): each would wake the real-time
// reader for a read, holding a core and overrunning the socket, blind to
// other pods' commands meanwhile. With 6.6's filter a thread's exit still
// comes (the filter takes kinds, not the leader). A load past the
// message's end ends the program with 0: a message too short is dropped.
// Acks are wanted only until the listen request's has come: after it,
// any process in the host's network, pid and user namespaces (a
// hostNetwork, hostPID pod), privileged or not, can have the kernel
// multicast one to every listener by sending a request (refused, EPERM,
// and acknowledged all the same).
func eventFilter(acks bool) []bpf.Instruction {
	const accept, drop = 11, 10
	none := accept - 5
	if !acks {
		none = drop - 5
	}
	return []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: offIdx, Size: 4},
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: wire(cnIdxProc), SkipTrue: accept - 2},
		/* 2 */ bpf.LoadAbsolute{Off: offWhat, Size: 4},
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: wire(procEventExec), SkipTrue: accept - 4},
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: wire(procEventNone), SkipTrue: uint8(none)},
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: wire(procEventExit), SkipTrue: drop - 6},
		/* 6 */ bpf.LoadAbsolute{Off: offTGID, Size: 4},
		/* 7 */ bpf.TAX{},
		/* 8 */ bpf.LoadAbsolute{Off: offPID, Size: 4},
		/* 9 */ bpf.JumpIfX{Cond: bpf.JumpEqual, SkipTrue: accept - 10},
		/* 10 */ bpf.RetConstant{Val: 0},
		/* 11 */ bpf.RetConstant{Val: 0xffffffff},
	}
}

// wire is v as a filter's 32-bit load reads it from a message in the
// host's byte order: the load takes the bytes as big-endian.
func wire(v uint32) uint32 {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return binary.BigEndian.Uint32(b[:])
}

// attachFilter sets eventFilter on the connector's socket, in place of
// the one set before.
func attachFilter(conn *netlink.Conn, acks bool) error {
	raw, err := bpf.Assemble(eventFilter(acks))
	if err != nil {
		return fmt.Errorf("filter the process events: %w", err)
	}
	f := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("filter the process events: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]})
	}); err != nil {
		return fmt.Errorf("filter the process events: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("filter the process events: %w", serr)
	}
	return nil
}
