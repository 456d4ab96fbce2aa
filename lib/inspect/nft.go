package inspect

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

type chainKey struct {
	fam          Family
	table, chain string
}

// readNft lists tables and chains with google/nftables, then streams every
// rule once. Its sockets carry the deadline so a huge ruleset, whose dump the
// kernel slows down quadratically per chain, ends on time.
func readNft(ctx context.Context, h *netns.Handle, deadline time.Time, opt Options, s *Snapshot) error {
	setDeadline := func(c *netlink.Conn) error { return c.SetDeadline(deadline) }
	conn, err := nftables.New(nftables.WithNetNSFd(h.Fd()), nftables.AsLasting(), nftables.WithSockOptions(setDeadline))
	if err != nil {
		return fmt.Errorf("open nftables in netns %q: %w", h.Path, err)
	}
	defer conn.CloseLasting()

	tables, err := conn.ListTables()
	if err != nil {
		return fmt.Errorf("list nftables tables in netns %q: %w", h.Path, err)
	}
	for _, t := range tables {
		s.Tables = append(s.Tables, Table{Family: FamilyOf(byte(t.Family)), Name: t.Name})
	}
	chains, err := conn.ListChains()
	if err != nil {
		return fmt.Errorf("list nftables chains in netns %q: %w", h.Path, err)
	}
	index := make(map[chainKey]int, len(chains))
	for _, c := range chains {
		if len(s.Chains) >= opt.MaxChains {
			s.Truncated = true
			break
		}
		ch := Chain{Family: FamilyOf(byte(c.Table.Family)), Table: c.Table.Name, Name: c.Name, Type: string(c.Type), Policy: 1}
		if c.Hooknum != nil {
			ch.Base = true
			ch.Hook = uint32(*c.Hooknum)
			if c.Priority != nil {
				ch.Priority = int32(*c.Priority)
			}
			if c.Policy != nil {
				ch.Policy = uint32(*c.Policy)
			}
		}
		index[chainKey{ch.Family, ch.Table, ch.Name}] = len(s.Chains)
		s.Chains = append(s.Chains, ch)
	}
	return dumpRules(ctx, h, deadline, opt, s, index)
}

// dumpRules asks the kernel for all rules of all families in one dump and
// reads it as a stream: counting needs only expression names, so data is
// copied only for the rules kept in detail.
func dumpRules(ctx context.Context, h *netns.Handle, deadline time.Time, opt Options, s *Snapshot, index map[chainKey]int) error {
	// A large receive buffer matters for speed, not just syscalls: the
	// kernel sizes each dump batch by the largest buffer recvmsg was given,
	// and every batch restarts its walk of the chain from the first rule.
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: h.Fd(), MessageBufferSize: 1 << 16})
	if err != nil {
		return fmt.Errorf("dial netfilter netlink in netns %q: %w", h.Path, err)
	}
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return fmt.Errorf("set netlink deadline: %w", err)
	}
	req := netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE),
			Flags: netlink.Request | netlink.Dump,
		},
		// nfgenmsg: AF_UNSPEC dumps every family, version 0, res_id 0.
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	}
	if _, err := c.Send(req); err != nil {
		return fmt.Errorf("request nftables rules in netns %q: %w", h.Path, err)
	}
	d := dumper{opt: opt, s: s, index: index}
	n := 0
	for m, err := range c.ReceiveIter() {
		if err != nil {
			return fmt.Errorf("dump nftables rules in netns %q: %w", h.Path, err)
		}
		if n++; n%1024 == 0 && ctx.Err() != nil {
			return fmt.Errorf("dump nftables rules in netns %q: %w", h.Path, ctx.Err())
		}
		if len(m.Data) < 4 {
			continue
		}
		d.add(m.Data[0], m.Data[4:])
	}
	return nil
}

// dumper accumulates the streamed rules into the snapshot.
type dumper struct {
	opt   Options
	s     *Snapshot
	index map[chainKey]int
	// scratch is reused for every rule not kept, so counting allocates little.
	scratch []Expr
	// table and chain of the previous rule: the dump comes chain by chain,
	// so most rules reuse these strings instead of allocating their own.
	table, chain string
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

// add parses one NFT_MSG_NEWRULE payload by hand: google/nftables would
// decode every expression fully, which costs more than the kernel's dump.
func (d *dumper) add(fam byte, b []byte) {
	opt, s, index := d.opt, d.s, d.index
	r := Rule{Exprs: d.scratch[:0]}
	var exprs []byte
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
		}
	})
	xt := false
	sum := fnv64a(fnvOffset)
	eachAttr(exprs, func(typ uint16, elem []byte) {
		if typ != unix.NFTA_LIST_ELEM {
			return
		}
		var name string
		var data []byte
		eachAttr(elem, func(typ uint16, v []byte) {
			switch typ {
			case unix.NFTA_EXPR_NAME:
				name = exprName(trimNUL(v))
			case unix.NFTA_EXPR_DATA:
				data = v
			}
		})
		if name == "match" || name == "target" {
			xt = true
		}
		sum = sum.str(name).byte(0)
		// Counter values change with traffic; the rule's meaning does not.
		if name != "counter" {
			sum = sum.bytes(data)
		}
		r.Exprs = append(r.Exprs, Expr{Name: name, Data: data})
	})
	r.Sum = uint64(sum)
	d.scratch = r.Exprs

	k := chainKey{r.Family, r.Table, r.Chain}
	i, ok := index[k]
	if !ok {
		// A chain added after the chain listing: count its rules all the same.
		if len(s.Chains) >= opt.MaxChains {
			s.Truncated = true
			return
		}
		i = len(s.Chains)
		index[k] = i
		s.Chains = append(s.Chains, Chain{Family: r.Family, Table: r.Table, Name: r.Chain, Policy: 1})
	}
	ch := &s.Chains[i]
	ch.Rules++
	if xt {
		ch.XTRules++
	}
	ch.Sum = ch.Sum*uint64(fnvPrime) ^ r.Sum

	if opt.Detail != nil && len(s.Rules) < opt.MaxDetail && opt.Detail(r.Family, r.Table, xt) {
		// The scratch slice and receive buffer are reused: copy what is kept.
		kept := make([]Expr, len(r.Exprs))
		for j, e := range r.Exprs {
			kept[j] = Expr{Name: e.Name, Data: append([]byte(nil), e.Data...)}
		}
		r.Exprs = kept
		s.Rules = append(s.Rules, r)
	}
}

// knownExprs interns expression names so a million rules do not allocate a
// million copies of "counter".
var knownExprs = map[string]string{}

func init() {
	for _, n := range []string{"bitwise", "byteorder", "cmp", "counter", "ct", "dup", "dynset", "exthdr", "fib", "flow_offload", "fwd", "hash", "immediate", "last", "limit", "log", "lookup", "masq", "match", "meta", "nat", "notrack", "numgen", "objref", "osf", "payload", "queue", "quota", "range", "redir", "reject", "rt", "secmark", "socket", "synproxy", "target", "tproxy", "tunnel", "xfrm", "connlimit", "inner"} {
		knownExprs[n] = n
	}
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

// fnv64a is FNV-1a kept in a value: hash.Hash64 would allocate per rule.
type fnv64a uint64

const (
	fnvOffset fnv64a = 14695981039346656037
	fnvPrime  fnv64a = 1099511628211
)

func (h fnv64a) byte(c byte) fnv64a { return (h ^ fnv64a(c)) * fnvPrime }

func (h fnv64a) bytes(b []byte) fnv64a {
	for _, c := range b {
		h = (h ^ fnv64a(c)) * fnvPrime
	}
	return h
}

func (h fnv64a) str(s string) fnv64a {
	for i := 0; i < len(s); i++ {
		h = (h ^ fnv64a(s[i])) * fnvPrime
	}
	return h
}
