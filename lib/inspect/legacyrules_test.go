package inspect

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// blobBuilder lays out x_tables entries as the kernel copies them out, so
// the walk is tested on tables no iptables would write too.
type blobBuilder struct {
	fam  Family
	blob []byte
}

func ext(name string, rev byte, data []byte) []byte {
	n := 32 + (len(data)+7)&^7
	b := make([]byte, n)
	binary.NativeEndian.PutUint16(b, uint16(n))
	copy(b[2:31], name)
	b[31] = rev
	copy(b[32:], data)
	return b
}

func verdict(v int32) []byte {
	d := make([]byte, 4)
	binary.NativeEndian.PutUint32(d, uint32(v))
	return ext("", 0, d)
}

func errorTarget(name string) []byte {
	d := make([]byte, 30)
	copy(d, name)
	return ext("ERROR", 0, d)
}

// add appends an entry and returns its offset.
func (bb *blobBuilder) add(head []byte, target []byte, matches ...[]byte) int {
	lay := entryLayouts[bb.fam]
	e := make([]byte, lay.size)
	copy(e, head)
	for _, m := range matches {
		e = append(e, m...)
	}
	binary.NativeEndian.PutUint16(e[lay.targetOffset:], uint16(len(e)))
	e = append(e, target...)
	binary.NativeEndian.PutUint16(e[lay.targetOffset+2:], uint16(len(e)))
	off := len(bb.blob)
	bb.blob = append(bb.blob, e...)
	return off
}

// setVerdict rewrites the standard verdict of the entry at off.
func (bb *blobBuilder) setVerdict(off int, v int32) {
	lay := entryLayouts[bb.fam]
	to := int(binary.NativeEndian.Uint16(bb.blob[off+lay.targetOffset:]))
	binary.NativeEndian.PutUint32(bb.blob[off+to+32:], uint32(v))
}

type walked struct {
	Chains   []LegacyChain
	Rules    []string
	Complete bool
}

func walkText(fam Family, blob []byte, th tableHooks) walked {
	var w walked
	w.Chains, w.Complete = walkEntries(fam, "filter", blob, th, func(r LegacyRule) bool {
		var m []string
		for _, x := range r.Matches {
			m = append(m, x.Name)
		}
		w.Rules = append(w.Rules, r.Chain+" m="+strings.Join(m, ",")+" t="+r.Target.Name+" v="+r.Verdict+map[bool]string{true: " goto"}[r.Goto])
		return true
	})
	return w
}

// TestWalkEntries: built-in chains by GET_INFO's offsets with their
// policies, user chains by their ERROR heads (their closing RETURN is no
// rule), jumps and gotos named by the chain they point at, a verdict
// pointing at the next entry is no target, and anything iptables never
// writes is marked instead of guessed.
func TestWalkEntries(t *testing.T) {
	bb := &blobBuilder{fam: IP}
	gotoHead := make([]byte, 84)
	gotoHead[82] = 0x02
	input := bb.add(nil, verdict(0), ext("comment", 0, []byte("hi\x00")))
	jump := bb.add(nil, verdict(0))
	gotoRule := bb.add(gotoHead, verdict(0))
	count := bb.add(nil, verdict(0))
	bb.setVerdict(count, int32(len(bb.blob)))
	odd := bb.add(nil, verdict(-7))
	policy := bb.add(nil, verdict(-1))
	bb.add(nil, errorTarget("USER"))
	user := bb.add(nil, ext("MARK", 2, make([]byte, 8)))
	bb.add(nil, verdict(-5))
	bb.add(nil, errorTarget("ERROR"))
	bb.setVerdict(jump, int32(user))
	bb.setVerdict(gotoRule, int32(user))
	bb.setVerdict(input, -2)
	th := tableHooks{valid: 1 << 1, entry: []uint32{0, uint32(input), 0, 0, 0}, underflow: []uint32{0, uint32(policy), 0, 0, 0}}
	_ = odd
	got := walkText(IP, bb.blob, th)
	want := walked{
		Chains: []LegacyChain{{Name: "INPUT", Builtin: true, Policy: "DROP"}, {Name: "USER"}},
		Rules: []string{
			"INPUT m=comment t= v=ACCEPT",
			"INPUT m= t= v=USER",
			"INPUT m= t= v=USER goto",
			"INPUT m= t= v=",
			"INPUT m= t= v=?",
			"USER m= t=MARK v=",
		},
		Complete: true,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("walk (-want +got):\n%s", d)
	}
	// Cut anywhere, the walk keeps the whole entries before the cut (so
	// a longer blob never gives fewer rules) and says it did not reach
	// the end.
	prev := 0
	for n := 0; n < len(bb.blob); n++ {
		w := walkText(IP, bb.blob[:n], th)
		if w.Complete {
			t.Fatalf("cut at %d: complete", n)
		}
		if len(w.Rules) > len(want.Rules) || len(w.Rules) < prev {
			t.Fatalf("cut at %d: %d rules, %d at a shorter cut", n, len(w.Rules), prev)
		}
		prev = len(w.Rules)
	}
	if prev < len(want.Rules)-1 {
		t.Errorf("cut before the last entry: %d rules", prev)
	}
	// A rule callback saying stop ends the rules, incomplete, but every
	// chain is still named.
	n := 0
	chains, complete := walkEntries(IP, "filter", bb.blob, th, func(LegacyRule) bool { n++; return n < 2 })
	if complete || n != 2 || !cmp.Equal(chains, want.Chains) {
		t.Errorf("stopped walk: complete=%v after %d rules, chains %+v", complete, n, chains)
	}
}

// FuzzWalkEntries: any bytes and any hook offsets give rules or none,
// never a panic, an endless walk, or a rule reaching outside the blob.
func FuzzWalkEntries(f *testing.F) {
	bb := &blobBuilder{fam: IP}
	bb.add(nil, verdict(-2), ext("tcp", 0, make([]byte, 12)))
	bb.add(nil, errorTarget("C"))
	bb.add(nil, verdict(-5))
	bb.add(nil, errorTarget("ERROR"))
	f.Add(bb.blob, uint32(2), uint32(0), uint32(0), byte(0))
	f.Add([]byte{}, uint32(0), uint32(0), uint32(0), byte(1))
	f.Fuzz(func(t *testing.T, blob []byte, valid, entry, underflow uint32, fam byte) {
		fams := []Family{IP, IP6, ARP}
		th := tableHooks{valid: valid}
		for h := 0; h < 5; h++ {
			th.entry = append(th.entry, entry+uint32(h)*40)
			th.underflow = append(th.underflow, underflow+uint32(h)*40)
		}
		total := 0
		walkEntries(fams[int(fam)%len(fams)], "t", blob, th, func(r LegacyRule) bool {
			total += len(r.Head) + len(r.Target.Data)
			for _, m := range r.Matches {
				total += len(m.Data)
			}
			if total > len(blob) {
				t.Fatalf("rules hold %d bytes of a %d-byte blob", total, len(blob))
			}
			return true
		})
	})
}
