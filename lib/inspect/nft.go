package inspect

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// ErrIncomplete marks a dump the kernel ended before its end: a chain holds
// more rules or references than the rules dumped account for. It happens
// when one rule does not fit in the kernel's largest dump batch (32 KiB):
// the kernel then ends the dump there for every dumper, nft included. It
// also marks a look at a ruleset that kept changing while it was read
// (errChanged), and a table with more verdict maps than the check counts
// the jumps of (countSetJumps).
var ErrIncomplete = errors.New("nftables dump incomplete")

// errChanged marks a look the ruleset changed under: a dump message the
// kernel flagged NLM_F_DUMP_INTR, or a generation that moved between the
// look's start and its end. A dump resumes at the position where its last
// batch ended, so a rule deleted ahead of that position shifts the next
// rule into it unseen, and a rule added in its place keeps every chain's
// count right: the look may have missed a rule without anything else
// showing it. readNft looks again.
var errChanged = fmt.Errorf("%w: the ruleset changed while it was read", ErrIncomplete)

type chainKey struct {
	fam          Family
	table, chain string
}

// nlSession is one netfilter netlink socket inside the namespace, read
// with plain blocking system calls, outside Go's network poller: a socket
// in the poller wakes the poller's thread at every batch the kernel
// queues (a hundred for 10,000 rules), for nobody, and that was a tenth
// of a big dump's time. Its receive timeout is the deadline, so a huge
// ruleset, whose dump the kernel slows down quadratically, ends on time
// with what was read so far.
type nlSession struct {
	fd       int
	seq      uint32
	deadline time.Time
	ctx      context.Context
	path     string
	// buf receives every batch: one buffer for the whole look, so a pod's
	// 30 MB of rules cost the hook 64 KiB, not 30 MB of garbage. Its size
	// is also what the kernel sizes its batches by (up to 32 KiB).
	buf []byte
	// ahead reads a long dump's next batches on another goroutine while
	// this one decodes (Options.ReadAhead).
	ahead bool
}

// openSession opens a netfilter netlink socket in h's namespace with a
// receive buffer of size bytes, reads bounded by deadline.
func openSession(ctx context.Context, h *netns.Handle, deadline time.Time, size int) (*nlSession, error) {
	fd := -1
	err := h.Do(func() error {
		var err error
		// A netlink socket belongs to the netns it was made in, wherever
		// it is used after.
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial netfilter netlink in netns %q: %w", h.Path, err)
	}
	n := &nlSession{fd: fd, deadline: deadline, ctx: ctx, path: h.Path, buf: getBuf(size)}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		n.close()
		return nil, fmt.Errorf("bind netfilter netlink in netns %q: %w", h.Path, err)
	}
	// Connected to the kernel (port 0), the socket takes no other
	// socket's message: a process of the pod with CAP_NET_ADMIN can send
	// to any netfilter socket in its netns (/proc/net/netlink lists their
	// ports), and a forged end of dump or generation with the expected
	// sequence number would be read as the kernel's answer.
	if err := unix.Connect(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		n.close()
		return nil, fmt.Errorf("connect netfilter netlink in netns %q: %w", h.Path, err)
	}
	if err := n.setTimeout(); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

func (n *nlSession) close() {
	unix.Close(n.fd)
	putBuf(n.buf)
	n.buf = nil
}

// bufs keeps receive buffers between looks: the agent's sweep opens a
// session per pod, and 64 KiB each was most of a clean pod's garbage.
var bufs sync.Pool

func getBuf(size int) []byte {
	if b, ok := bufs.Get().(*[]byte); ok && cap(*b) >= size {
		return (*b)[:size]
	}
	return make([]byte, size)
}

func putBuf(b []byte) { bufs.Put(&b) }

// setTimeout sets the socket's receive timeout to what is left before
// the deadline; at least a microsecond, as zero means no timeout.
func (n *nlSession) setTimeout() error {
	tv := unix.NsecToTimeval(max(time.Until(n.deadline), time.Microsecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(n.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("set netlink deadline in netns %q: %w", n.path, err)
	}
	return nil
}

// recv reads one batch into buf by the deadline. raw makes the system
// call without telling Go's scheduler (readAhead's reader). In a
// scheduler-aware call the runtime's monitor thread takes the reader's
// processor back whenever work waits on it (the decoder, woken by the last
// hand-over), and it then wakes every 20 µs for the whole dump (a
// twentieth of the hook's CPU at 10,000 rules). Raw, the processor stays
// with the reader while the kernel builds the next batch inside the call.
// A raw call that waits (nothing queued) ends at the receive timeout set
// last, or at a signal: the runtime's preemption signal ends it with EINTR
// (the socket has a timeout), so a garbage collection does not wait it out.
func (n *nlSession) recv(buf []byte, raw bool) (int, error) {
	for {
		// The receive timeout bounds a wait only: a dump whose batches
		// are always ready (300,000 chains) never waits.
		if !time.Now().Before(n.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		var nr int
		var err error
		trunc := false
		if raw {
			// MSG_TRUNC: netlink then returns the batch's whole length.
			r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(n.fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_TRUNC, 0, 0)
			nr, trunc = int(r), int(r) > len(buf)
			if e != 0 {
				err = e
			}
		} else {
			var rflags int
			nr, _, rflags, _, err = unix.Recvmsg(n.fd, buf, nil, 0)
			trunc = rflags&unix.MSG_TRUNC != 0
		}
		switch {
		case err == unix.EINTR:
			// A signal (SIGCHLD of the legacy peek, the runtime's own)
			// ends a wait on a socket with a receive timeout even under
			// SA_RESTART; the wait goes on for what is left of it.
			if err := n.setTimeout(); err != nil {
				return 0, err
			}
		case err == unix.EAGAIN:
			return 0, os.ErrDeadlineExceeded
		case err != nil:
			return 0, err
		case trunc:
			return 0, errors.New("message bigger than the receive buffer")
		default:
			return nr, nil
		}
	}
}

// request sends one nftables request with the next sequence number.
func (n *nlSession) request(typ, flags uint16, fam byte, attrs []byte) error {
	n.seq++
	// nlmsghdr, then nfgenmsg: family (AF_UNSPEC: all of them), version 0,
	// res_id 0, then the attributes.
	req := make([]byte, 20, 20+len(attrs))
	binary.NativeEndian.PutUint16(req[4:], unix.NFNL_SUBSYS_NFTABLES<<8|typ)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(req[8:], n.seq)
	req[16], req[17] = fam, unix.NFNETLINK_V0
	req = append(req, attrs...)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	return unix.Sendto(n.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// dump sends one request and hands every reply message's family and
// attributes to fn, until the end of the dump (or the one reply of a plain
// request). It reads to the end even when fn keeps nothing, so the next
// request on the socket starts clean.
func (n *nlSession) dump(typ, flags uint16, fam byte, attrs []byte, what string, fn func(fam byte, b []byte)) error {
	if err := n.request(typ, flags, fam, attrs); err != nil {
		return fmt.Errorf("request nftables %s in netns %q: %w", what, n.path, err)
	}
	for batches := 1; ; batches++ {
		if batches%64 == 0 && n.ctx.Err() != nil {
			return fmt.Errorf("dump nftables %s in netns %q: %w", what, n.path, n.ctx.Err())
		}
		nr, err := n.recv(n.buf, false)
		if err != nil {
			return fmt.Errorf("dump nftables %s in netns %q: %w", what, n.path, err)
		}
		done, err := eachMessage(n.buf[:nr], n.seq, fn)
		if err != nil {
			return fmt.Errorf("dump nftables %s in netns %q: %w", what, n.path, err)
		}
		if done {
			return nil
		}
		// A dump not over after two batches is a long one (a table or
		// chain dump ends in its second, the rules of a small pod too).
		if n.ahead && batches >= 2 {
			if err := n.readAhead(batches+1, fn); err != nil {
				return fmt.Errorf("dump nftables %s in netns %q: %w", what, n.path, err)
			}
			return nil
		}
	}
}

// aheadGroup is how many batches the reader hands over at once: each
// hand-over wakes the decoder's thread, about 30 µs of CPU (decoding a
// batch of rules takes about 50). BenchmarkInspect at 10,000 rules, time
// and CPU: in turn 25.3 and 26.5 ms; groups of 2 22.4 and 30.2 ms, of 4
// 21.3 and 29.1, of 8 20.9 and 28.3. Twice as many buffers let the reader
// fill the next group while one is decoded; memory stays bounded (16
// buffers of 64 KiB, of which the kernel fills 32) whatever the ruleset's
// size.
const (
	aheadGroup   = 8
	aheadBuffers = 2 * aheadGroup
)

// batch is one received batch handed from the reader to the decoder.
type batch struct {
	buf  []byte
	n    int
	err  error
	done bool
}

// readAhead reads the rest of a dump that did not end in its first two
// batches: a goroutine receives the batches, this one decodes them. In a
// big dump the kernel's work for the next batch (its walk over the rules
// given already, then the copy) is most of the time, so on two cores the
// decoding hides behind it, where one goroutine did one after the other.
// next is the number of the next batch. It returns after the reader ended
// (at the dump's end, its first error, or when told to stop), whatever fn
// does, a panic included: the socket is never read after the session
// closes, and no buffer after it went back to the pool.
func (n *nlSession) readAhead(next int, fn func(fam byte, b []byte)) error {
	full := make(chan []batch, 2)
	free := make(chan []byte, aheadBuffers)
	free <- n.buf
	for i := 1; i < aheadBuffers; i++ {
		free <- getBuf(len(n.buf))
	}
	var stop atomic.Bool
	defer func() {
		stop.Store(true)
		// Whatever the reader still sends is taken, so it can end.
		for group := range full {
			for _, b := range group {
				free <- b.buf
			}
		}
		// n.buf goes on receiving; the others go back to the pool.
		close(free)
		for b := range free {
			if &b[0] != &n.buf[0] {
				putBuf(b)
			}
		}
	}()
	go func() {
		defer close(full)
		var group []batch
		for ; ; next++ {
			b := batch{buf: <-free}
			switch {
			case stop.Load():
				b.err = errStopped
			case next%64 == 0 && n.ctx.Err() != nil:
				b.err = n.ctx.Err()
			default:
				if b.n, b.err = n.recv(b.buf, true); b.err == nil {
					// The headers alone say where the dump ends, so the
					// reader stops there instead of waiting for the
					// deadline. A message in error ends it too; the
					// decoder, which reads the messages before it, says
					// the error.
					b.done, _ = eachMessage(b.buf[:b.n], n.seq, nil)
				}
			}
			group = append(group, b)
			end := b.err != nil || b.done
			if len(group) == aheadGroup || end {
				full <- group
				group = make([]batch, 0, aheadGroup)
			}
			if end {
				return
			}
		}
	}()
	var err error
	for group := range full {
		for _, b := range group {
			switch {
			case err != nil:
			case b.err != nil:
				err = b.err
			default:
				_, err = eachMessage(b.buf[:b.n], n.seq, fn)
			}
			free <- b.buf
		}
	}
	return err
}

// errStopped ends a reader whose decoder has gone (a panic in it).
var errStopped = errors.New("read-ahead stopped")

// eachMessage walks the netlink messages of one received batch that answer
// request seq. done reports the end: NLMSG_DONE, an error or ack, or the
// reply to a plain (not dump) request. A nil fn only finds the end.
func eachMessage(b []byte, seq uint32, fn func(fam byte, b []byte)) (done bool, err error) {
	const hdr = 16 // struct nlmsghdr
	for len(b) >= hdr {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		typ := binary.NativeEndian.Uint16(b[4:6])
		flags := binary.NativeEndian.Uint16(b[6:8])
		mseq := binary.NativeEndian.Uint32(b[8:12])
		if l < hdr || l > len(b) {
			return true, errors.New("malformed netlink message")
		}
		payload := b[hdr:l]
		b = b[min((l+3)&^3, len(b)):]
		if mseq != seq {
			continue // a late answer to an earlier request
		}
		// The kernel flags a dump's message when the ruleset's generation
		// moved since its previous batch (nl_dump_check_consistent), the
		// closing NLMSG_DONE included: what the dump gave may lack rules.
		// nft itself dumps again then.
		if flags&unix.NLM_F_DUMP_INTR != 0 {
			return true, errChanged
		}
		switch typ {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(payload) < 4 {
				return true, errors.New("malformed netlink error")
			}
			if code := int32(binary.NativeEndian.Uint32(payload[0:4])); code != 0 {
				return true, unix.Errno(-code)
			}
			return true, nil
		}
		if len(payload) >= 4 && fn != nil {
			fn(payload[0], payload[4:])
		}
		if flags&unix.NLM_F_MULTI == 0 {
			return true, nil
		}
	}
	return false, nil
}

// maxLooks bounds the looks readNft takes at a ruleset that changes while
// it is read: a pod that rewrites its rules in a loop gets an incomplete
// look (errChanged), not a hook that looks until the deadline.
const maxLooks = 3

// readNft reads tables, chains and rules (readNftOnce) and looks again, up
// to maxLooks in all, when the ruleset changed while it was read. A look
// is taken again only if the time left before the deadline is more than
// the last one took: one that could not end would turn a change the kernel
// reported into a deadline reached, and wait for it.
func readNft(ctx context.Context, h *netns.Handle, deadline time.Time, opt Options, s *Snapshot) error {
	if f := opt.FirstListed; f != nil {
		// Once for the whole read, not once a look.
		called := false
		opt.FirstListed = func() {
			if !called {
				called = true
				f()
			}
		}
	}
	for looks := 1; ; looks++ {
		start := time.Now()
		err := readNftOnce(ctx, h, deadline, opt, s)
		if !errors.Is(err, errChanged) || looks == maxLooks || time.Until(deadline) < time.Since(start) {
			return err
		}
		// The snapshot holds nothing but this read's yet.
		*s = Snapshot{}
	}
}

// readNftOnce reads tables, chains and rules with our own streamed dumps: a
// library listing would hold every message in memory and has no deadline
// inside it, so a namespace with 300,000 chains gave nothing at all.
func readNftOnce(ctx context.Context, h *netns.Handle, deadline time.Time, opt Options, s *Snapshot) error {
	// The buffer size matters for completeness, not just speed: the kernel
	// sizes each dump batch by the largest buffer recvmsg was given (up to
	// 32 KiB), and a message that does not fit an empty batch ends the
	// dump silently. The first batch of a dump is built before any recvmsg,
	// hence the GETGEN round trip below before any dump.
	n, err := openSession(ctx, h, deadline, 1<<16)
	if err != nil {
		return err
	}
	defer n.close()
	// With one processor the two goroutines would take turns: only the
	// hand-overs' cost would be left.
	n.ahead = opt.ReadAhead && runtime.GOMAXPROCS(0) > 1
	if err := n.dump(unix.NFT_MSG_GETGEN, 0, unix.AF_UNSPEC, nil, "generation", func(_ byte, b []byte) {
		s.State.Gen, s.StateOK = genOf(b)
	}); err != nil {
		return err
	}
	if err := n.dump(unix.NFT_MSG_GETTABLE, unix.NLM_F_DUMP, unix.AF_UNSPEC, nil, "tables", func(fam byte, b []byte) {
		addTable(fam, b, opt, s)
	}); err != nil {
		return err
	}
	d := dumper{opt: opt, s: s, index: map[chainKey]int{}, pending: map[chainKey]uint32{}}
	// The rules of the tables opt.First names are read first, so that a
	// pod's huge native ruleset can use up neither the deadline nor the
	// chain bound before them. The kernel filters a rule dump by table but
	// not a chain dump: their chains come from their rules first, and get
	// their hook and policy from the dump of all chains after.
	var first, rest []Table
	for _, t := range s.Tables {
		if opt.First != nil && opt.First(t.Family, t.Name) && t.Family.Number() != 0 {
			first = append(first, t)
		} else {
			rest = append(rest, t)
		}
	}
	if len(first) > 0 && opt.FirstListed != nil {
		opt.FirstListed()
	}
	d.skip = map[tableKey]bool{}
	for _, t := range first {
		d.skip[tableKey{t.Family, t.Name}] = true
	}
	d.first = true
	if err := d.tableRules(n, first); err != nil {
		return err
	}
	d.first = false
	if err := n.dump(unix.NFT_MSG_GETCHAIN, unix.NLM_F_DUMP, unix.AF_UNSPEC, nil, "chains", d.addChain); err != nil {
		return err
	}
	// Then the other tables' rules: table by table when they are few and
	// all listed, so the kernel does not dump the first ones again; else
	// in one dump of all that passes over the tables read already.
	if err := d.restRules(n, rest); err != nil {
		return err
	}
	err = d.check(n)
	// Only after dumps that all ended: a chain short of rules included, as
	// a rule deleted while it was read makes one, and a look again then
	// sees it whole.
	if s.StateOK && (err == nil || errors.Is(err, ErrIncomplete) && !errors.Is(err, errChanged)) {
		err = errors.Join(err, n.sameGeneration(s.State.Gen))
	}
	if d.tooMany {
		err = errors.Join(err, fmt.Errorf("track nftables chains in netns %q: %w: more than %d, the rest not counted", h.Path, ErrTooMany, opt.MaxChains))
	}
	return err
}

// sameGeneration reads the generation again after the look's last dump,
// and returns errChanged if it is not gen, the one the look began with. A
// dump flags a change made while it ran, not one made between two dumps:
// a rule moved from a table whose rules are read later to one read
// already was in neither dump. The kernel bumps the generation at every
// commit in the namespace. It is the one round trip a look at an unchanged
// ruleset pays for this.
func (n *nlSession) sameGeneration(gen uint32) error {
	now, found := uint32(0), false
	if err := n.dump(unix.NFT_MSG_GETGEN, 0, unix.AF_UNSPEC, nil, "generation", func(_ byte, b []byte) {
		now, found = genOf(b)
	}); err != nil {
		return err
	}
	if !found || now != gen {
		return fmt.Errorf("read nftables in netns %q: %w (generation %d at its start, %d at its end)", n.path, errChanged, gen, now)
	}
	return nil
}

// tableRules dumps the rules of the tables one by one.
func (d *dumper) tableRules(n *nlSession, tables []Table) error {
	for _, t := range tables {
		filter := attr(unix.NFTA_RULE_TABLE, append([]byte(t.Name), 0))
		if err := n.dump(unix.NFT_MSG_GETRULE, unix.NLM_F_DUMP, t.Family.Number(), filter, "rules", d.addRule); err != nil {
			return err
		}
	}
	return nil
}

// maxTableDumps bounds the one-table rule dumps of restRules: each is a
// round trip, one dump of all is cheaper past a few.
const maxTableDumps = 16

// restRules dumps the rules of every table not read yet.
func (d *dumper) restRules(n *nlSession, rest []Table) error {
	listed := len(d.s.Tables) < maxTables
	for _, t := range rest {
		if t.Family.Number() == 0 {
			listed = false
		}
	}
	if len(d.skip) == 0 || !listed || len(rest) > maxTableDumps {
		return n.dump(unix.NFT_MSG_GETRULE, unix.NLM_F_DUMP, unix.AF_UNSPEC, nil, "rules", d.addRule)
	}
	return d.tableRules(n, rest)
}

// maxTables bounds the tables listed (names of up to 255 bytes each).
const maxTables = 1024

// addTable lists a table. Beyond maxTables it is left out without making
// the snapshot truncated (usage lives in chains and rules, counted apart),
// unless opt.First names it: those are few, and must be read first.
func addTable(fam byte, b []byte, opt Options, s *Snapshot) {
	t := Table{Family: FamilyOf(fam)}
	eachAttr(b, func(typ uint16, data []byte) {
		if typ == unix.NFTA_TABLE_NAME {
			t.Name = string(trimNUL(data))
		}
	})
	if len(s.Tables) >= maxTables && (opt.First == nil || !opt.First(t.Family, t.Name)) {
		return
	}
	s.Tables = append(s.Tables, t)
}

// dumper accumulates the streamed chains and rules into the snapshot.
type dumper struct {
	opt   Options
	s     *Snapshot
	index map[chainKey]int
	// use is each chain's NFTA_CHAIN_USE, refs the jumps to it seen in
	// rules (both by chain index): the kernel counts a chain's rules plus
	// the verdicts that jump to it, so use > Rules+refs means rules the
	// dump did not give.
	use  []uint32
	refs []uint32
	// pending counts jumps to chains not indexed yet, by name; refsLost is
	// set when it was full, and the use check cannot conclude.
	pending  map[chainKey]uint32
	refsLost bool
	// keptBytes is the expression data kept so far (Options.MaxDetailBytes).
	keptBytes int
	// tooMany is set when a chain was left out (Options.MaxChains).
	tooMany bool
	// skip holds the tables whose rules are read first (Options.First);
	// first is set while they are, after it their rules are passed over.
	skip  map[tableKey]bool
	first bool
	// scratch is reused for every rule not kept, so counting allocates little.
	scratch []Expr
	// table and chain of the previous rule: the dump comes chain by chain,
	// so most rules reuse these strings instead of allocating their own.
	table, chain string
	// last is the previous rule's chain, looked up in skip and index:
	// the next rule of the same chain needs neither map (two string
	// hashes a rule, a tenth of the decoding at 10,000 rules).
	last lastChain
	// keptData and keptExprs are the free tails of the blocks the kept
	// rules' copies are cut from: two allocations per block instead of one
	// per expression and one per rule (the sweep's garbage collection was
	// most of its CPU beside the kernel's).
	keptData  []byte
	keptExprs []Expr
}

// lastChain is a chain's lookups kept from one rule to the next.
type lastChain struct {
	key     chainKey
	ok      bool
	skip    bool
	i       int
	indexed bool
}

// keptBlock is the least a block of kept copies holds, in bytes of
// expression data or in expressions.
const keptBlock = 16 << 10

// keep copies rule r's expressions, whose data lies in exprs (the rule's
// NFTA_RULE_EXPRESSIONS in the receive buffer), into the dumper's blocks.
func (d *dumper) keep(r *Rule, exprs []byte) {
	if len(d.keptData) < len(exprs) {
		d.keptData = make([]byte, max(keptBlock, len(exprs)))
	}
	data := d.keptData[:len(exprs):len(exprs)]
	d.keptData = d.keptData[len(exprs):]
	copy(data, exprs)
	if len(d.keptExprs) < len(r.Exprs) {
		d.keptExprs = make([]Expr, max(keptBlock/64, len(r.Exprs)))
	}
	kept := d.keptExprs[:len(r.Exprs):len(r.Exprs)]
	d.keptExprs = d.keptExprs[len(r.Exprs):]
	for j, e := range r.Exprs {
		kept[j] = Expr{Name: e.Name}
		// e.Data was cut from exprs with two-index slices, which keep the
		// capacity: what it lacks of exprs's capacity is its offset.
		if off := cap(exprs) - cap(e.Data); e.Data != nil && off >= 0 && off+len(e.Data) <= len(exprs) {
			kept[j].Data = data[off : off+len(e.Data) : off+len(e.Data)]
		} else if e.Data != nil {
			kept[j].Data = append([]byte(nil), e.Data...)
		}
	}
	r.Exprs = kept
}

// addChain parses one NFT_MSG_NEWCHAIN payload.
func (d *dumper) addChain(fam byte, b []byte) {
	s := d.s
	ch := Chain{Family: FamilyOf(fam), Policy: 1}
	var use, flags uint32
	eachAttr(b, func(typ uint16, data []byte) {
		switch typ {
		case unix.NFTA_CHAIN_TABLE:
			d.table = reuse(d.table, data)
			ch.Table = d.table
		case unix.NFTA_CHAIN_NAME:
			ch.Name = string(trimNUL(data))
		case unix.NFTA_CHAIN_TYPE:
			ch.Type = string(trimNUL(data))
		case unix.NFTA_CHAIN_POLICY:
			ch.Policy = be32(data)
		case unix.NFTA_CHAIN_USE:
			use = be32(data)
		case nftaChainFlags:
			flags = be32(data)
		case unix.NFTA_CHAIN_HOOK:
			ch.Base = true
			eachAttr(data, func(typ uint16, v []byte) {
				switch typ {
				case unix.NFTA_HOOK_HOOKNUM:
					ch.Hook = be32(v)
				case unix.NFTA_HOOK_PRIORITY:
					ch.Priority = int32(be32(v))
				}
			})
		}
	})
	if flags&nftChainBinding != 0 && use > 0 {
		// An anonymous chain (jump { ... }) holds one more use for being
		// bound to its rule, besides the jump itself.
		use--
	}
	k := chainKey{ch.Family, ch.Table, ch.Name}
	if i, ok := d.index[k]; ok {
		// Known from its rules (read first): keep the counts.
		ch.Rules, ch.XTRules, ch.Sum = s.Chains[i].Rules, s.Chains[i].XTRules, s.Chains[i].Sum
		ch.NativeRules, ch.Foreign = s.Chains[i].NativeRules, s.Chains[i].Foreign
		if s.Chains[i].PolicyRule && !ch.Base {
			ch.PolicyRule, ch.Policy = true, s.Chains[i].Policy
		}
		s.Chains[i], d.use[i] = ch, use
		return
	}
	d.newChain(k, ch, use)
}

// newChain tracks a chain not seen yet, keeping index, use and refs in step
// with s.Chains (check() walks them together). Past MaxChains it marks the
// snapshot truncated and returns false.
func (d *dumper) newChain(k chainKey, ch Chain, use uint32) (int, bool) {
	s := d.s
	if len(s.Chains) >= d.opt.MaxChains {
		s.Truncated, d.tooMany = true, true
		return 0, false
	}
	i := len(s.Chains)
	d.index[k] = i
	d.last.ok = false // its index changed
	s.Chains = append(s.Chains, ch)
	d.use = append(d.use, use)
	d.refs = append(d.refs, d.pending[k])
	delete(d.pending, k)
	return i, true
}

// NFTA_CHAIN_FLAGS and its NFT_CHAIN_BINDING bit (linux 5.9), which
// x/sys/unix does not name.
const (
	nftaChainFlags  = 10
	nftChainBinding = 0x4
)

func be32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// reuse returns prev when b spells the same name, else a new string.
func reuse(prev string, b []byte) string {
	b = trimNUL(b)
	if string(b) == prev {
		return prev
	}
	return string(b)
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// addRule parses one NFT_MSG_NEWRULE payload by hand: a library would
// decode every expression fully, which costs more than the kernel's dump.
func (d *dumper) addRule(fam byte, b []byte) {
	opt, s, index := d.opt, d.s, d.index
	r := Rule{Exprs: d.scratch[:0]}
	var exprs, udata []byte
	r.Family = FamilyOf(fam)
	eachAttr(b, func(typ uint16, data []byte) {
		switch typ {
		case unix.NFTA_RULE_TABLE:
			d.table = reuse(d.table, data)
			r.Table = d.table
		case unix.NFTA_RULE_CHAIN:
			d.chain = reuse(d.chain, data)
			r.Chain = d.chain
		case unix.NFTA_RULE_HANDLE:
			if len(data) == 8 {
				r.Handle = binary.BigEndian.Uint64(data)
			}
		case unix.NFTA_RULE_EXPRESSIONS:
			exprs = data
		case unix.NFTA_RULE_USERDATA:
			udata = data
		}
	})
	k := chainKey{r.Family, r.Table, r.Chain}
	if !d.last.ok || d.last.key != k {
		i, indexed := index[k]
		d.last = lastChain{key: k, ok: true, skip: d.skip[tableKey{r.Family, r.Table}], i: i, indexed: indexed}
	}
	if d.last.skip != d.first {
		return
	}
	xt := false
	sum := fnv64a(fnvOffset)
	eachAttr(exprs, func(typ uint16, elem []byte) {
		if typ != unix.NFTA_LIST_ELEM {
			return
		}
		name, data := exprOf(elem)
		if name == "match" || name == "target" {
			xt = true
		}
		if name == "immediate" {
			d.countJump(r.Family, r.Table, data)
		}
		sum = sumExpr(sum, name, data)
		r.Exprs = append(r.Exprs, Expr{Name: name, Data: data})
	})
	r.Sum = uint64(sum)
	d.scratch = r.Exprs

	i := d.last.i
	if !d.last.indexed {
		// A chain added after the chain listing: count its rules all the same.
		var ok bool
		if i, ok = d.newChain(k, Chain{Family: r.Family, Table: r.Table, Name: r.Chain, Policy: 1}, 0); !ok {
			return
		}
	}
	ch := &s.Chains[i]
	// The dump gives a chain's rules in order: a policy rule followed by
	// another rule was not the chain's policy after all, and counts.
	if ch.PolicyRule {
		ch.Rules++
		ch.PolicyRule, ch.Policy = false, 1
	}
	ch.Sum = ch.Sum*uint64(fnvPrime) ^ r.Sum
	if verdict, ok := ebtPolicy(r, udata); ok {
		// Not kept in detail either: it is no rule to show, and one that
		// turns out not to be the last is only "counter accept" or "drop".
		ch.PolicyRule, ch.Policy = true, verdict
		return
	}
	ch.Rules++
	if xt {
		ch.XTRules++
	}
	if opt.Native != nil && opt.First != nil && opt.First(r.Family, r.Table) {
		rule, table := opt.Native(r.Family, r.Exprs)
		r.Native = rule && !xt
		if r.Native {
			ch.NativeRules++
		}
		ch.Foreign = ch.Foreign || table
	}

	if opt.Detail != nil && len(s.Rules) < opt.MaxDetail && d.keptBytes+len(exprs) <= opt.MaxDetailBytes && opt.Detail(r.Family, r.Table, xt) {
		d.keptBytes += len(exprs)
		// The scratch slice and receive buffer are reused: copy what is kept.
		d.keep(&r, exprs)
		s.Rules = append(s.Rules, r)
	}
}

// udataEbtPolicy is UDATA_TYPE_EBTABLES_POLICY, the userdata TLV (type
// byte, length byte, value) ebtables-nft puts on the rule that stands for a
// user chain's policy.
const udataEbtPolicy = 1

// NF_ACCEPT and NF_DROP, the verdict codes x/sys/unix does not name.
const (
	nfDrop   = 0
	nfAccept = 1
)

// ebtPolicy reports whether r is ebtables-nft's policy rule of a user chain
// and returns its verdict: a bridge rule of exactly "counter" and an
// accept or drop verdict, marked in its userdata. Anything else is a rule.
func ebtPolicy(r Rule, udata []byte) (uint32, bool) {
	if r.Family != Bridge || len(r.Exprs) != 2 || r.Exprs[0].Name != "counter" || r.Exprs[1].Name != "immediate" {
		return 0, false
	}
	marked := false
	for b := udata; len(b) >= 2 && int(b[1])+2 <= len(b); b = b[int(b[1])+2:] {
		if b[0] == udataEbtPolicy {
			marked = true
		}
	}
	if !marked {
		return 0, false
	}
	verdict, ok := uint32(0), false
	eachAttr(r.Exprs[1].Data, func(typ uint16, v []byte) {
		if typ != unix.NFTA_IMMEDIATE_DATA {
			return
		}
		eachAttr(v, func(typ uint16, vd []byte) {
			if typ != unix.NFTA_DATA_VERDICT {
				return
			}
			eachAttr(vd, func(typ uint16, a []byte) {
				if typ == unix.NFTA_VERDICT_CODE && len(a) == 4 {
					verdict, ok = be32(a), true
				}
			})
		})
	})
	if !ok || (verdict != nfAccept && verdict != nfDrop) {
		return 0, false
	}
	return verdict, true
}

// exprOf splits one NFTA_LIST_ELEM of an expression list.
func exprOf(elem []byte) (name string, data []byte) {
	eachAttr(elem, func(typ uint16, v []byte) {
		switch typ {
		case unix.NFTA_EXPR_NAME:
			name = exprName(trimNUL(v))
		case unix.NFTA_EXPR_DATA:
			data = v
		}
	})
	return name, data
}

// countJump notes the chain a jump or goto verdict (in an immediate
// expression's or a set element's data) points to.
func (d *dumper) countJump(fam Family, table string, data []byte) {
	eachAttr(data, func(typ uint16, v []byte) {
		// NFTA_IMMEDIATE_DATA and NFTA_SET_ELEM_DATA are both 2.
		if typ != unix.NFTA_IMMEDIATE_DATA {
			return
		}
		eachAttr(v, func(typ uint16, verdict []byte) {
			if typ != unix.NFTA_DATA_VERDICT {
				return
			}
			var code uint32
			var target []byte
			eachAttr(verdict, func(typ uint16, a []byte) {
				switch typ {
				case unix.NFTA_VERDICT_CODE:
					code = be32(a)
				case unix.NFTA_VERDICT_CHAIN:
					target = trimNUL(a)
				}
			})
			if int32(code) != unix.NFT_JUMP && int32(code) != unix.NFT_GOTO {
				return
			}
			k := chainKey{fam, table, string(target)}
			if i, ok := d.index[k]; ok {
				d.refs[i]++
			} else if len(d.pending) < d.opt.MaxChains {
				// A chain not met yet (its rules or listing come later).
				d.pending[k]++
			} else {
				d.refsLost = true
			}
		})
	})
}

// check compares each chain's use count with the rules and jumps the dumps
// gave. Jumps from verdict maps are counted only for tables where the
// rules alone leave a difference: reading set elements costs.
func (d *dumper) check(n *nlSession) error {
	if d.refsLost {
		return nil
	}
	short := d.shortTables()
	if len(short) == 0 {
		return nil
	}
	for tk := range short {
		if err := d.countSetJumps(n, tk); err != nil {
			return err
		}
	}
	for i, ch := range d.s.Chains {
		if seen := ch.seen() + d.refs[i]; d.use[i] > seen {
			d.s.Truncated = true
			return fmt.Errorf("dump nftables rules in netns %q: %w: chain %s %s %s has %d rules and references, the dump gave %d",
				n.path, ErrIncomplete, ch.Family, quote(ch.Table), quote(ch.Name), d.use[i], seen)
		}
	}
	return nil
}

// seen is the number of rules the dump gave for the chain, its policy rule
// included: the kernel's use count holds that one too.
func (c Chain) seen() uint32 {
	if c.PolicyRule {
		return uint32(c.Rules) + 1
	}
	return uint32(c.Rules)
}

type tableKey struct {
	fam   Family
	table string
}

// shortTables lists the tables holding a chain whose use count is above
// what the rules account for.
func (d *dumper) shortTables() map[tableKey]bool {
	short := map[tableKey]bool{}
	for i, ch := range d.s.Chains {
		if d.use[i] > ch.seen()+d.refs[i] {
			short[tableKey{ch.Family, ch.Table}] = true
		}
	}
	return short
}

// verdictData is NFT_DATA_VERDICT, the data type of a verdict map.
const verdictData = 0xffffff00

// countSetJumps adds the jumps held in the table's verdict maps. It holds
// the maps' names, up to Options.MaxChains of them (a pod's 200,000 maps of
// long names held tens of MB); past it the chains' use counts cannot be
// checked, and the look is incomplete.
func (d *dumper) countSetJumps(n *nlSession, tk tableKey) error {
	tableAttr := attr(unix.NFTA_SET_TABLE, append([]byte(tk.table), 0))
	var maps []string
	tooMany := false
	err := n.dump(unix.NFT_MSG_GETSET, unix.NLM_F_DUMP, tk.fam.Number(), tableAttr, "sets", func(_ byte, b []byte) {
		var name []byte
		var dataType uint32
		eachAttr(b, func(typ uint16, v []byte) {
			switch typ {
			case unix.NFTA_SET_NAME:
				name = trimNUL(v)
			case unix.NFTA_SET_DATA_TYPE:
				dataType = be32(v)
			}
		})
		switch {
		case dataType != verdictData:
		case len(maps) >= d.opt.MaxChains:
			tooMany = true
		default:
			maps = append(maps, string(name))
		}
	})
	if err != nil {
		return err
	}
	if tooMany {
		d.s.Truncated = true
		return fmt.Errorf("dump nftables sets in netns %q: %w: table %s %s holds more than %d verdict maps, the jumps in them not counted",
			n.path, ErrIncomplete, tk.fam, quote(tk.table), d.opt.MaxChains)
	}
	for _, m := range maps {
		req := append(attr(unix.NFTA_SET_ELEM_LIST_TABLE, append([]byte(tk.table), 0)), attr(unix.NFTA_SET_ELEM_LIST_SET, append([]byte(m), 0))...)
		err := n.dump(unix.NFT_MSG_GETSETELEM, unix.NLM_F_DUMP, tk.fam.Number(), req, "set elements", func(_ byte, b []byte) {
			eachAttr(b, func(typ uint16, v []byte) {
				if typ != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
					return
				}
				eachAttr(v, func(typ uint16, elem []byte) {
					if typ == unix.NFTA_LIST_ELEM {
						d.countJump(tk.fam, tk.table, elem)
					}
				})
			})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// attr encodes one netlink attribute, padded to 4 bytes.
func attr(typ uint16, v []byte) []byte {
	b := make([]byte, 4, 4+len(v)+3)
	binary.NativeEndian.PutUint16(b[0:2], uint16(4+len(v)))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// quote bounds and quotes a pod-chosen name for an error message.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// knownExprs interns expression names so a million rules do not allocate a
// million copies of "counter": each name maps to itself (the kernel's
// nft_expr_type names).
var knownExprs = map[string]string{
	"bitwise":      "bitwise",
	"byteorder":    "byteorder",
	"cmp":          "cmp",
	"counter":      "counter",
	"ct":           "ct",
	"dup":          "dup",
	"dynset":       "dynset",
	"exthdr":       "exthdr",
	"fib":          "fib",
	"flow_offload": "flow_offload",
	"fwd":          "fwd",
	"hash":         "hash",
	"immediate":    "immediate",
	"last":         "last",
	"limit":        "limit",
	"log":          "log",
	"lookup":       "lookup",
	"masq":         "masq",
	"match":        "match",
	"meta":         "meta",
	"nat":          "nat",
	"notrack":      "notrack",
	"numgen":       "numgen",
	"objref":       "objref",
	"osf":          "osf",
	"payload":      "payload",
	"queue":        "queue",
	"quota":        "quota",
	"range":        "range",
	"redir":        "redir",
	"reject":       "reject",
	"rt":           "rt",
	"secmark":      "secmark",
	"socket":       "socket",
	"synproxy":     "synproxy",
	"target":       "target",
	"tproxy":       "tproxy",
	"tunnel":       "tunnel",
	"xfrm":         "xfrm",
	"connlimit":    "connlimit",
	"inner":        "inner",
}

func exprName(b []byte) string {
	// m[string(b)] does not allocate: the common names cost nothing.
	if n, ok := knownExprs[string(b)]; ok {
		return n
	}
	if len(b) > 32 {
		b = b[:32]
	}
	return string(b)
}

// nlaTypeMask strips the nested and byte-order flags from an attribute type.
const nlaTypeMask = 0x3fff

// Attrs walks the netlink attributes of an expression's data (Expr.Data)
// as inspect does, without allocating; malformed data ends the walk.
func Attrs(b []byte, fn func(typ uint16, data []byte)) { eachAttr(b, fn) }

// eachAttr walks netlink attributes (4-byte header, 4-byte aligned).
func eachAttr(b []byte, fn func(typ uint16, data []byte)) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		typ := binary.NativeEndian.Uint16(b[2:4]) & nlaTypeMask
		if l < 4 || l > len(b) {
			return
		}
		fn(typ, b[4:l])
		adv := (l + 3) &^ 3
		if adv > len(b) {
			return
		}
		b = b[adv:]
	}
}
