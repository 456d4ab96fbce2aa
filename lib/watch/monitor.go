package watch

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// nfnlgrpNftables is NFNLGRP_NFTABLES, the group nf_tables announces
// committed changes on.
const nfnlgrpNftables = 7

// Defaults for Options' zero values.
const (
	// DefaultReadBuffer is the kernel's receive buffer: about 4,000 rule
	// announcements. Kernel memory is charged only while announcements
	// wait, and an overrun costs a full scan, never a miss.
	DefaultReadBuffer = 1 << 20
	// DefaultQueue bounds the Changes waiting for the caller; past it the
	// reader waits, and the kernel's buffer then overruns (an Overrun).
	DefaultQueue = 16
	// datagram is the user-space read buffer, shared among monitors
	// between reads: nf_tables batches announcements into datagrams of at
	// most a page or two, and a longer one is seen (MSG_TRUNC) and taken
	// as touching iptables' tables.
	datagram = 64 << 10
)

// Change is one commit (or, with Overrun, an unknown number of them).
type Change struct {
	// Gen is the generation the commit made (NFTA_GEN_ID).
	Gen uint32
	// PID (in the host's pid namespace) and Comm are the committing
	// process as the kernel names it; Comm is the process's choice.
	PID  int
	Comm string
	// Tables are the iptables-shaped tables the commit touched, "family
	// name", sorted; empty when an announcement could not be read whole.
	Tables []string
	// Objects counts the objects the commit announced, of any table.
	Objects int
	// Overrun: the kernel dropped announcements (ENOBUFS); what changed is
	// not known, only that something may have.
	Overrun bool
	// Writer is Options.Writer's description of PID, read as the commit's
	// end arrived; nil without Options.Writer.
	Writer *findings.Writer
}

// Options tune a Monitor; the zero value takes the defaults.
type Options struct {
	ReadBuffer int
	Queue      int
	// Writer, when set, describes the committing process; called by the
	// reader as soon as the commit's end arrives, before the process can
	// exit, and only for commits that are delivered.
	Writer func(pid int, comm string) *findings.Writer
}

// Monitor listens to one network namespace's nftables commits.
type Monitor struct {
	conn    *netlink.Conn
	changes chan Change
	done    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

var buffers = sync.Pool{New: func() any { b := make([]byte, datagram); return &b }}

// Open starts a monitor in the network namespace fd refers to (which need
// not stay open: the socket holds the namespace until Close).
func Open(fd int, opt Options) (*Monitor, error) {
	if opt.ReadBuffer <= 0 {
		opt.ReadBuffer = DefaultReadBuffer
	}
	if opt.Queue <= 0 {
		opt.Queue = DefaultQueue
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: fd})
	if err != nil {
		return nil, fmt.Errorf("open nftables monitor: %w", err)
	}
	if err := c.JoinGroup(nfnlgrpNftables); err != nil {
		c.Close()
		return nil, fmt.Errorf("join nftables group: %w", err)
	}
	if err := setReadBuffer(c, opt.ReadBuffer); err != nil {
		c.Close()
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("open nftables monitor: %w", err)
	}
	m := &Monitor{conn: c, changes: make(chan Change, opt.Queue), done: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(m.changes)
		m.read(rc, opt.Writer)
	}()
	return m, nil
}

// setReadBuffer sets the kernel's receive buffer: SO_RCVBUFFORCE (with
// CAP_NET_ADMIN, which the agent has) is not capped by net.core.rmem_max,
// whose default (about 200 KiB) a restore of a few hundred rules fills.
func setReadBuffer(c *netlink.Conn, n int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("set monitor receive buffer: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		return fmt.Errorf("set monitor receive buffer: %w", err)
	}
	if serr == nil {
		return nil
	}
	if err := c.SetReadBuffer(n); err != nil {
		return fmt.Errorf("set monitor receive buffer: %w", err)
	}
	return nil
}

// Changes delivers the commits that touched iptables-shaped tables, and
// overruns; it is closed after Close, or when the socket fails.
func (m *Monitor) Changes() <-chan Change { return m.changes }

// Close stops the reader and closes the socket, releasing the namespace.
func (m *Monitor) Close() error {
	var err error
	m.once.Do(func() {
		close(m.done)
		err = m.conn.Close()
		m.wg.Wait()
	})
	return err
}

// commit gathers one commit's announcements until its NEWGEN: a count and
// the iptables-shaped table names, never the objects.
type commit struct {
	objects int
	tables  []string
	// unsure: an announcement was cut or malformed, so whether the commit
	// touched iptables' tables is not known: taken as if it did.
	unsure bool
}

func (c *commit) add(m message) {
	c.objects++
	if m.xtTable != "" && !slices.Contains(c.tables, m.xtTable) {
		c.tables = append(c.tables, m.xtTable)
	}
}

// read receives until the socket closes. Every error but ENOBUFS (and
// EINTR-like retries the runtime does) ends it: the caller sees Changes
// closed and reopens.
func (m *Monitor) read(rc interface {
	Read(func(uintptr) bool) error
}, describe func(int, string) *findings.Writer) {
	var cur commit
	for {
		var (
			bp    *[]byte
			n     int
			flags int
			rerr  error
		)
		err := rc.Read(func(fd uintptr) bool {
			bp = buffers.Get().(*[]byte)
			n, _, flags, _, rerr = unix.Recvmsg(int(fd), *bp, nil, unix.MSG_DONTWAIT)
			if errors.Is(rerr, unix.EAGAIN) {
				buffers.Put(bp)
				return false
			}
			return true
		})
		if err != nil {
			return
		}
		if rerr != nil {
			buffers.Put(bp)
			if !errors.Is(rerr, unix.ENOBUFS) {
				return
			}
			// The commit in progress lost announcements; the overrun
			// stands for it and for whatever else was dropped.
			cur = commit{}
			if !m.send(Change{Overrun: true}) {
				return
			}
			continue
		}
		if flags&unix.MSG_TRUNC != 0 {
			cur.unsure = true
		}
		var out []Change
		ok := parse((*bp)[:n], func(msg message) {
			if !msg.gen {
				cur.add(msg)
				return
			}
			if len(cur.tables) > 0 || cur.unsure {
				ch := Change{Gen: msg.id, PID: int(msg.pid), Comm: msg.comm, Tables: cur.tables, Objects: cur.objects}
				slices.Sort(ch.Tables)
				if describe != nil {
					ch.Writer = describe(ch.PID, ch.Comm)
				}
				out = append(out, ch)
			}
			cur = commit{}
		})
		buffers.Put(bp)
		if !ok {
			cur.unsure = true
		}
		for _, ch := range out {
			if !m.send(ch) {
				return
			}
		}
	}
}

// send delivers ch, waiting for room; false once Close was called.
func (m *Monitor) send(ch Change) bool {
	select {
	case m.changes <- ch:
		return true
	case <-m.done:
		return false
	}
}
