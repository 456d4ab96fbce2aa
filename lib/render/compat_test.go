package render

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"golang.org/x/sys/unix"
)

// info builds an xt info blob: host-order fields, padded to XT_ALIGN (8) as
// the kernel requires.
func info(fields ...any) *xt.Unknown {
	var b []byte
	for _, f := range fields {
		switch v := f.(type) {
		case uint8:
			b = append(b, v)
		case uint16:
			b = binary.NativeEndian.AppendUint16(b, v)
		case uint32:
			b = binary.NativeEndian.AppendUint32(b, v)
		case []byte:
			b = append(b, v...)
		}
	}
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	u := xt.Unknown(b)
	return &u
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// ipProtoPayload is how iptables-nft before 1.8.4 matched -p in ip tables.
func ipProtoPayload(p byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 9, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func cat(parts ...[]expr.Any) []expr.Any {
	var all []expr.Any
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

func xtREJECT(with uint32) []expr.Any {
	return []expr.Any{&expr.Counter{}, &expr.Target{Name: "REJECT", Rev: 0, Info: info(with)}}
}

var counter = []expr.Any{&expr.Counter{}}

// hopCmp is "ip ttl OP v" (IPv4) or "ip6 hoplimit OP v" (IPv6).
func hopCmp(fam inspect.Family, op expr.CmpOp, v byte) []expr.Any {
	off := uint32(8)
	if fam == inspect.IP6 {
		off = 7
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte{v}},
	}
}

// pktType is "meta pkttype OP v".
func pktType(op expr.CmpOp, v byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyPKTTYPE, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: []byte{v}}}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

// xtTCP is struct xt_tcp: spts[2], dpts[2], option, flg_mask, flg_cmp, invflags.
func xtTCP(slo, shi, dlo, dhi uint16, mask, cmpv, inv uint8) []expr.Any {
	return []expr.Any{&expr.Match{Name: "tcp", Rev: 0, Info: info(slo, shi, dlo, dhi, uint8(0), mask, cmpv, inv)}}
}

// xtUDP is struct xt_udp: spts[2], dpts[2], invflags.
func xtUDP(slo, shi, dlo, dhi uint16, inv uint8) []expr.Any {
	return []expr.Any{&expr.Match{Name: "udp", Rev: 0, Info: info(slo, shi, dlo, dhi, inv)}}
}

// TestCompatGenerations writes each rule twice in one chain: once with the
// real iptables-nft 1.8.9 (native expressions where it has them) and once
// the way another iptables generation writes it (xt blobs, older native
// patterns, or newer native ones), then requires both to render to the
// same text.
func TestCompatGenerations(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "ip6tables-nft")
	meta169 := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{169, 254, 169, 254}},
	}
	cases := []struct {
		name     string
		fam      inspect.Family
		table    string
		chain    string
		iptables string
		other    []expr.Any
		want     string
		// entry is the built-in allowlist entry both generations must match.
		entry string
	}{{
		name: "tcp dport syn as xt tcp", fam: inspect.IP, table: "filter", chain: "OUTPUT",
		iptables: "iptables-nft -A OUTPUT -p tcp --dport 22623 --syn -j REJECT",
		other:    cat(l4proto(6), xtTCP(0, 0xffff, 22623, 22623, 0x17, 0x02, 0), xtREJECT(3)),
		want:     "-A OUTPUT -p tcp --dport 22623 --syn -j REJECT",
		entry:    "ovn-kubernetes-block-mcs-ipv4",
	}, {
		name: "tcp with -p as ip header payload", fam: inspect.IP, table: "filter", chain: "OUTPUT",
		iptables: "iptables-nft -A OUTPUT -p tcp -m tcp --dport 22624 --tcp-flags FIN,SYN,RST,ACK SYN -j REJECT --reject-with icmp-port-unreachable",
		other:    cat(ipProtoPayload(6), xtTCP(0, 0xffff, 22624, 22624, 0x17, 0x02, 0), xtREJECT(3)),
		want:     "-A OUTPUT -p tcp --dport 22624 --syn -j REJECT",
		entry:    "ovn-kubernetes-block-mcs-ipv4",
	}, {
		name: "udp not dport as xt udp", fam: inspect.IP, table: "filter", chain: "FORWARD",
		iptables: "iptables-nft -A FORWARD -d 169.254.169.254/32 -p udp -m udp ! --dport 53 -j REJECT --reject-with icmp-port-unreachable",
		other:    cat(meta169, l4proto(17), xtUDP(0, 0xffff, 53, 53, 2), xtREJECT(3)),
		want:     "-A FORWARD -d 169.254.169.254 -p udp ! --dport 53 -j REJECT",
		entry:    "ovn-kubernetes-block-metadata",
	}, {
		name: "tcp port range as cmp gte/lte", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -p tcp --dport 1000:2000 -j ACCEPT",
		other: cat(l4proto(6), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpGte, Register: 1, Data: []byte{0x03, 0xe8}},
			&expr.Cmp{Op: expr.CmpOpLte, Register: 1, Data: []byte{0x07, 0xd0}},
		}, counter, verdict(expr.VerdictAccept)),
		want: "-A INPUT -p tcp --dport 1000:2000 -j ACCEPT",
	}, {
		// Native forms iptables-nft itself decodes (nft-ruleparse.c):
		// the TTL and hop limit compares (nft_parse_hl) and meta pkttype.
		name: "ttl eq as native payload", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m ttl --ttl-eq 1 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP, expr.CmpOpEq, 1), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m ttl --ttl-eq 1 -j ACCEPT",
	}, {
		name: "ttl ne as native payload", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m ttl ! --ttl-eq 2 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP, expr.CmpOpNeq, 2), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m ttl ! --ttl-eq 2 -j ACCEPT",
	}, {
		name: "ttl lt as native payload", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m ttl --ttl-lt 3 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP, expr.CmpOpLt, 3), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m ttl --ttl-lt 3 -j ACCEPT",
	}, {
		name: "ttl gt as native payload", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m ttl --ttl-gt 4 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP, expr.CmpOpGt, 4), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m ttl --ttl-gt 4 -j ACCEPT",
	}, {
		name: "ttl lte as native payload", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m ttl --ttl-lt 6 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP, expr.CmpOpLte, 5), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m ttl --ttl-lt 6 -j ACCEPT",
	}, {
		name: "ttl gte as native payload", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m ttl --ttl-gt 5 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP, expr.CmpOpGte, 6), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m ttl --ttl-gt 5 -j ACCEPT",
	}, {
		name: "hop limit eq as native payload", fam: inspect.IP6, table: "filter", chain: "INPUT",
		iptables: "ip6tables-nft -A INPUT -m hl --hl-eq 1 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP6, expr.CmpOpEq, 1), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m hl --hl-eq 1 -j ACCEPT",
	}, {
		name: "hop limit ne as native payload", fam: inspect.IP6, table: "filter", chain: "INPUT",
		iptables: "ip6tables-nft -A INPUT -m hl ! --hl-eq 255 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP6, expr.CmpOpNeq, 255), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m hl ! --hl-eq 255 -j ACCEPT",
	}, {
		name: "hop limit lt as native payload", fam: inspect.IP6, table: "filter", chain: "INPUT",
		iptables: "ip6tables-nft -A INPUT -m hl --hl-lt 3 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP6, expr.CmpOpLt, 3), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m hl --hl-lt 3 -j ACCEPT",
	}, {
		name: "hop limit gte as native payload", fam: inspect.IP6, table: "filter", chain: "INPUT",
		iptables: "ip6tables-nft -A INPUT -m hl --hl-gt 5 -j ACCEPT",
		other:    cat(hopCmp(inspect.IP6, expr.CmpOpGte, 6), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m hl --hl-gt 5 -j ACCEPT",
	}, {
		name: "pkttype as native meta", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m pkttype --pkt-type broadcast -j ACCEPT",
		other:    cat(pktType(expr.CmpOpEq, 1), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m pkttype --pkt-type broadcast -j ACCEPT",
	}, {
		name: "pkttype ne as native meta", fam: inspect.IP6, table: "filter", chain: "INPUT",
		iptables: "ip6tables-nft -A INPUT -m pkttype ! --pkt-type unicast -j ACCEPT",
		other:    cat(pktType(expr.CmpOpNeq, 0), counter, verdict(expr.VerdictAccept)),
		want:     "-A INPUT -m pkttype ! --pkt-type unicast -j ACCEPT",
	}, {
		name: "mark as xt mark", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m mark --mark 0x10/0xff -j ACCEPT",
		other: cat([]expr.Any{&expr.Match{Name: "mark", Rev: 1, Info: info(uint32(0x10), uint32(0xff), uint8(0))}},
			counter, verdict(expr.VerdictAccept)),
		want: "-A INPUT -m mark --mark 0x10/0xff -j ACCEPT",
	}, {
		name: "limit as xt limit", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m limit --limit 5/min --limit-burst 7 -j ACCEPT",
		// struct xt_rateinfo: avg (1/10000 s per packet), burst, then kernel state.
		other: cat([]expr.Any{&expr.Match{Name: "limit", Rev: 0, Info: info(uint32(120000), uint32(7), make([]byte, 32))}},
			counter, verdict(expr.VerdictAccept)),
		want: "-A INPUT -m limit --limit 5/min --limit-burst 7 -j ACCEPT",
	}, {
		name: "state as xt state", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		other: cat([]expr.Any{&expr.Match{Name: "state", Rev: 0, Info: info(uint32(2 | 4))}},
			counter, verdict(expr.VerdictAccept)),
		want: "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
	}, {
		// xt_state (revision 0, older clients' -m state) keeps UNTRACKED
		// at 1 << (IP_CT_NUMBER+1), 0x40, where xt_conntrack keeps SNAT
		// (it was read at 0x10, which no client writes).
		name: "state untracked as xt state", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m state --state UNTRACKED -j ACCEPT",
		other: cat([]expr.Any{&expr.Match{Name: "state", Rev: 0, Info: info(uint32(0x40))}},
			counter, verdict(expr.VerdictAccept)),
		want: "-A INPUT -m conntrack --ctstate UNTRACKED -j ACCEPT",
	}, {
		name: "ctstate untracked as native ct state", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m conntrack --ctstate UNTRACKED -j ACCEPT",
		other: cat([]expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binary.NativeEndian.AppendUint32(nil, 0x40), Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
		}, counter, verdict(expr.VerdictAccept)),
		want: "-A INPUT -m conntrack --ctstate UNTRACKED -j ACCEPT",
	}, {
		name: "ctstate as native ct state", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -m state --state NEW -j ACCEPT",
		other: cat([]expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binary.NativeEndian.AppendUint32(nil, 8), Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
		}, counter, verdict(expr.VerdictAccept)),
		want: "-A INPUT -m conntrack --ctstate NEW -j ACCEPT",
	}, {
		name: "reject as native reject", fam: inspect.IP, table: "filter", chain: "OUTPUT",
		iptables: "iptables-nft -A OUTPUT -j REJECT --reject-with icmp-port-unreachable",
		other:    cat(counter, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3}}),
		want:     "-A OUTPUT -j REJECT",
	}, {
		name: "tcp-reset as native reject", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: "iptables-nft -A INPUT -p tcp -j REJECT --reject-with tcp-reset",
		other:    cat(l4proto(6), counter, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
		want:     "-A INPUT -p tcp -j REJECT --reject-with tcp-reset",
	}, {
		name: "ip6 reject as native icmpx", fam: inspect.IP6, table: "filter", chain: "OUTPUT",
		iptables: "ip6tables-nft -A OUTPUT -p tcp --dport 22623 --syn -j REJECT",
		other: cat(l4proto(6), xtTCP(0, 0xffff, 22623, 22623, 0x17, 0x02, 0), counter,
			[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}}),
		want: "-A OUTPUT -p tcp --dport 22623 --syn -j REJECT",
	}, {
		name: "MARK as native meta mark set", fam: inspect.IP, table: "mangle", chain: "PREROUTING",
		iptables: "iptables-nft -t mangle -A PREROUTING -j MARK --set-mark 0x1",
		other: cat(counter, []expr.Any{
			&expr.Immediate{Register: 1, Data: binary.NativeEndian.AppendUint32(nil, 1)},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		}),
		want: "-A PREROUTING -j MARK --set-xmark 0x1/0xffffffff",
	}, {
		name: "CONNMARK save as native ct mark set", fam: inspect.IP, table: "mangle", chain: "PREROUTING",
		iptables: "iptables-nft -t mangle -A PREROUTING -j CONNMARK --save-mark",
		other: cat(counter, []expr.Any{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
			&expr.Ct{Key: expr.CtKeyMARK, SourceRegister: true, Register: 1},
		}),
		want: "-A PREROUTING -j CONNMARK --save-mark",
	}, {
		name: "NOTRACK as native notrack", fam: inspect.IP, table: "raw", chain: "PREROUTING",
		iptables: "iptables-nft -t raw -A PREROUTING -j CT --notrack",
		other:    cat(counter, []expr.Any{&expr.Notrack{}}),
		want:     "-A PREROUTING -j CT --notrack",
	}, {
		name: "LOG as native log", fam: inspect.IP, table: "filter", chain: "INPUT",
		iptables: `iptables-nft -A INPUT -j LOG --log-prefix "x: "`,
		other:    cat(counter, []expr.Any{&expr.Log{Key: 1 << unix.NFTA_LOG_PREFIX, Data: []byte("x: ")}}),
		want:     `-A INPUT -j LOG --log-prefix "x: "`,
	}, {
		name: "MASQUERADE as native masq", fam: inspect.IP, table: "nat", chain: "POSTROUTING",
		iptables: "iptables-nft -t nat -A POSTROUTING -j MASQUERADE --random-fully",
		other:    cat(counter, []expr.Any{&expr.Masq{FullyRandom: true}}),
		want:     "-A POSTROUTING -j MASQUERADE --random-fully",
	}, {
		name: "REDIRECT as native redir", fam: inspect.IP, table: "nat", chain: "OUTPUT",
		iptables: "iptables-nft -t nat -A OUTPUT -p tcp -j REDIRECT --to-ports 15001",
		other: cat(l4proto(6), counter, []expr.Any{
			&expr.Immediate{Register: 1, Data: []byte{0x3a, 0x99}},
			&expr.Redir{RegisterProtoMin: 1},
		}),
		want: "-A OUTPUT -p tcp -j REDIRECT --to-ports 15001",
	}, {
		name: "DNAT as native nat", fam: inspect.IP, table: "nat", chain: "PREROUTING",
		iptables: "iptables-nft -t nat -A PREROUTING -p tcp --dport 80 -j DNAT --to-destination 10.0.0.1:8080",
		other: cat(l4proto(6), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 80}},
		}, counter, []expr.Any{
			&expr.Immediate{Register: 1, Data: []byte{10, 0, 0, 1}},
			&expr.Immediate{Register: 2, Data: []byte{0x1f, 0x90}},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
		}),
		want: "-A PREROUTING -p tcp --dport 80 -j DNAT --to-destination 10.0.0.1:8080",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := nstest.New(t)
			ns.Run("bash", "-c", tc.iptables)
			addRule(t, ns.Path(), tc.fam, tc.table, tc.chain, tc.other)
			var got []string
			for _, r := range dumpRules(t, ns.Path()) {
				if r.Family == tc.fam && r.Table == tc.table && r.Chain == tc.chain {
					text := Text(r)
					got = append(got, text)
					if tc.entry != "" {
						if m := allowlist.Default().Match("any", r, func() string { return text }); m != tc.entry {
							t.Errorf("built-in allowlist matched %q for %q, want %q", m, text, tc.entry)
						}
					}
				}
			}
			if d := cmp.Diff([]string{tc.want, tc.want}, got); d != "" {
				t.Errorf("iptables-nft rule and other generation (-want +got):\n%s", d)
			}
		})
	}
}

func addRule(t *testing.T, nsPath string, fam inspect.Family, table, chain string, exprs []expr.Any) {
	t.Helper()
	f, err := os.Open(nsPath)
	if err != nil {
		t.Fatalf("open netns %q: %v", nsPath, err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())), nftables.AsLasting())
	if err != nil {
		t.Fatalf("nftables conn: %v", err)
	}
	defer c.CloseLasting()
	tf := nftables.TableFamilyIPv4
	if fam == inspect.IP6 {
		tf = nftables.TableFamilyIPv6
	}
	tb := &nftables.Table{Name: table, Family: tf}
	c.AddRule(&nftables.Rule{Table: tb, Chain: &nftables.Chain{Name: chain, Table: tb}, Exprs: exprs})
	if err := c.Flush(); err != nil {
		t.Fatalf("add rule %v in %s %s %s: %v", exprs, fam, table, chain, err)
	}
}

// TestTranslatedAlike renders a rule as iptables-nft writes it and as
// iptables-translate translates it to native nft (what
// iptables-restore-translate output loaded with nft -f holds): both must
// give the same text, with no unknown: token.
func TestTranslatedAlike(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-restore-translate", "nft", "bash")
	cases := []struct{ table, chain, rule string }{
		{"nat", "PREROUTING", "-m addrtype --dst-type LOCAL -j ACCEPT"},
		{"nat", "OUTPUT", "-m addrtype ! --src-type LOCAL --limit-iface-out -j ACCEPT"},
		{"raw", "PREROUTING", "-m rpfilter -j ACCEPT"},
		{"raw", "PREROUTING", "-m rpfilter --invert --validmark -j DROP"},
		{"mangle", "PREROUTING", "-m rpfilter --loose -j ACCEPT"},
		{"nat", "POSTROUTING", "-o eth0 -j MASQUERADE"},
	}
	for _, tc := range cases {
		t.Run(tc.table+" "+tc.rule, func(t *testing.T) {
			texts := make([]string, 2)
			rules := filepath.Join(t.TempDir(), "rules")
			for k, cmd := range []string{
				"iptables-nft -t " + tc.table + " -A " + tc.chain + " " + tc.rule,
				"printf '*" + tc.table + "\\n:" + tc.chain + " ACCEPT [0:0]\\n-A " + tc.chain + " " + tc.rule + "\\nCOMMIT\\n' >" + rules + " && " +
					"iptables-restore-translate -f " + rules + " | nft -f -",
			} {
				ns := nstest.New(t)
				ns.Run("bash", "-c", cmd)
				for _, r := range dumpRules(t, ns.Path()) {
					if r.Table == tc.table && r.Chain == tc.chain {
						texts[k] = Text(r)
					}
				}
			}
			if texts[0] != texts[1] || strings.Contains(texts[1], "unknown:") {
				t.Errorf("iptables-nft and translated rule differ:\n%s\n%s", texts[0], texts[1])
			}
		})
	}
}
