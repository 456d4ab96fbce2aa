package watch

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// nlmsg builds one nf_tables netlink message of type typ in family with
// the given attributes (type, value).
func nlmsg(typ uint8, family uint8, attrs ...any) []byte {
	var body []byte
	body = append(body, family, 0, 0, 0)
	for i := 0; i+1 < len(attrs); i += 2 {
		v := attrs[i+1].([]byte)
		a := make([]byte, nlaHdrLen, align(nlaHdrLen+len(v)))
		binary.NativeEndian.PutUint16(a[0:2], uint16(nlaHdrLen+len(v)))
		binary.NativeEndian.PutUint16(a[2:4], attrs[i].(uint16))
		a = append(a, v...)
		body = append(body, a[:align(len(a))]...)
	}
	h := make([]byte, nlmsgHdrLen)
	binary.NativeEndian.PutUint32(h[0:4], uint32(nlmsgHdrLen+len(body)))
	binary.NativeEndian.PutUint16(h[4:6], subsysNFT<<8|uint16(typ))
	return append(h, body...)
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func TestParse(t *testing.T) {
	const newRule, newTable = 6, 0
	tests := []struct {
		name string
		in   []byte
		want []message
		ok   bool
	}{
		{name: "rule in ip nat", in: nlmsg(newRule, 2, uint16(1), []byte("nat\x00")), want: []message{{object: true, xtTable: "ip nat"}}, ok: true},
		{name: "native inet table", in: nlmsg(newTable, 1, uint16(1), []byte("filter\x00")), want: []message{{object: true}}, ok: true},
		{name: "arp nat is not iptables'", in: nlmsg(newTable, 3, uint16(1), []byte("nat\x00")), want: []message{{object: true}}, ok: true},
		{name: "bridge broute", in: nlmsg(newTable, 7, uint16(1), []byte("broute\x00")), want: []message{{object: true, xtTable: "bridge broute"}}, ok: true},
		{
			name: "two messages, gen last",
			in: append(nlmsg(newRule, 10, uint16(1), []byte("mangle\x00")),
				nlmsg(msgNewGen, 0, uint16(attrGenID), be32(7), uint16(attrGenPID), be32(4242), uint16(attrGenName), []byte("iptables-nft\x00"))...),
			want: []message{{object: true, xtTable: "ip6 mangle"}, {gen: true, id: 7, pid: 4242, comm: "iptables-nft"}},
			ok:   true,
		},
		{name: "cut header", in: nlmsg(newRule, 2)[:10], ok: false},
		{name: "length past the end", in: func() []byte { b := nlmsg(newRule, 2); binary.NativeEndian.PutUint32(b, 99); return b }(), ok: false},
		{name: "malformed attribute", in: func() []byte {
			b := nlmsg(newRule, 2, uint16(1), []byte("nat\x00"))
			binary.NativeEndian.PutUint16(b[nlmsgHdrLen+nfgenHdrLen:], 200)
			return b
		}(), want: []message{{object: true}}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []message
			ok := parse(tt.in, func(m message) { got = append(got, m) })
			if ok != tt.ok {
				t.Errorf("ok %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(message{})); diff != "" {
				t.Errorf("messages (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParse: no datagram makes the parser panic or keep more than the
// bounded command name and a table name it knows.
func FuzzParse(f *testing.F) {
	f.Add(nlmsg(6, 2, uint16(1), []byte("nat\x00")))
	f.Add(nlmsg(msgNewGen, 0, uint16(attrGenID), be32(7), uint16(attrGenPID), be32(1), uint16(attrGenName), []byte("x\x00")))
	f.Fuzz(func(t *testing.T, b []byte) {
		parse(b, func(m message) {
			if len(m.comm) > maxComm {
				t.Errorf("comm of %d bytes", len(m.comm))
			}
			if m.xtTable != "" && len(m.xtTable) > len("bridge security") {
				t.Errorf("table %q", m.xtTable)
			}
		})
	})
}
