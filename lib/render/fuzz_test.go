package render

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

var fuzzNames = []string{"payload", "meta", "cmp", "bitwise", "range", "lookup", "immediate", "counter",
	"ct", "limit", "log", "reject", "nat", "masq", "redir", "tproxy", "notrack", "fib", "match", "target"}

var fuzzFams = []inspect.Family{inspect.IP, inspect.IP6, inspect.INet, inspect.ARP, inspect.Bridge, "bogus"}

// FuzzText cuts the input into expressions: each chunk starts with a byte
// choosing the name (a known kind or the raw bytes as a name) and a length.
// Text must never panic and must give one non-empty, printable line.
func FuzzText(f *testing.F) {
	f.Add([]byte{0, 0}, "OUTPUT")
	f.Add([]byte{17, 12, 0x0a, 0, 1, 0, 'm', 'a', 'r', 'k', 0, 0, 0, 0}, "INPUT")
	f.Add([]byte{2, 24, 8, 0, 1, 0, 0, 0, 0, 1, 8, 0, 2, 0, 0, 0, 0, 0, 12, 0, 3, 128, 5, 0, 1, 0, 6, 0, 0, 0}, "x\n")
	f.Fuzz(func(t *testing.T, data []byte, chain string) {
		r := inspect.Rule{Chain: chain}
		if len(data) > 0 {
			r.Family = fuzzFams[int(data[0])%len(fuzzFams)]
			data = data[1:]
		}
		for len(data) >= 2 {
			sel, n := int(data[0]), int(data[1])
			data = data[2:]
			if n > len(data) {
				n = len(data)
			}
			name := "x" + string(data[:n%8])
			if sel < 200 {
				name = fuzzNames[sel%len(fuzzNames)]
			}
			r.Exprs = append(r.Exprs, inspect.Expr{Name: name, Data: data[:n]})
			data = data[n:]
		}
		done := make(chan string, 1)
		go func() { done <- Text(r) }()
		var got string
		select {
		case got = <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Text hangs on %#v", r)
		}
		if got == "" || !strings.HasPrefix(got, "-A ") {
			t.Fatalf("text %q lacks the -A head", got)
		}
		for _, c := range []byte(got) {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("text %q holds byte %#x", got, c)
			}
		}
	})
}

// TestOpaqueNeverDropped: what is not understood still shows, and two
// different unknown blobs render differently.
func TestOpaqueNeverDropped(t *testing.T) {
	long1 := append(make([]byte, 100), 1)
	long2 := append(make([]byte, 100), 2)
	tests := []struct {
		name string
		expr inspect.Expr
		want string
	}{
		{"unknown kind", inspect.Expr{Name: "quux", Data: []byte{1, 2}}, "-A C -m unknown:expr/quux[0102]"},
		{"bad cmp", inspect.Expr{Name: "cmp", Data: []byte{1}}, "-A C -m unknown:expr/cmp[01]"},
		{"hostile name", inspect.Expr{Name: "a b\n", Data: nil}, `-A C -m unknown:expr/"a b\n"[]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(inspect.Rule{Family: inspect.IP, Chain: "C", Exprs: []inspect.Expr{tc.expr}}); got != tc.want {
				t.Errorf("Text = %q, want %q", got, tc.want)
			}
		})
	}
	a := Text(inspect.Rule{Chain: "C", Exprs: []inspect.Expr{{Name: "quux", Data: long1}}})
	b := Text(inspect.Rule{Chain: "C", Exprs: []inspect.Expr{{Name: "quux", Data: long2}}})
	if a == b || !strings.Contains(a, "...+37#") {
		t.Errorf("long blobs: %q and %q should differ and be marked cut", a, b)
	}
}

// TestDecodersBounded feeds every table decoder blobs of every length up to
// past its struct, all zero, all 0xff and random, in every family and
// revision: none may panic (Text would recover, but the whole rule would
// then turn opaque).
func TestDecodersBounded(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, fam := range fuzzFams {
		for n := 0; n <= 4200; n += 1 + n/64 {
			for _, fill := range []string{"zero", "ff", "random"} {
				blob := make([]byte, n)
				for k := range blob {
					switch fill {
					case "ff":
						blob[k] = 0xff
					case "random":
						blob[k] = byte(rnd.Uint32())
					}
				}
				for rev := uint32(0); rev < 5; rev++ {
					decoders := map[string]func(*builder){}
					for name, d := range xtMatches {
						decoders["match "+name] = func(b *builder) { d(b, rev, blob) }
					}
					for name, d := range xtTargets {
						decoders["target "+name] = func(b *builder) { d(b, rev, blob) }
					}
					for name, d := range decoders {
						func() {
							defer func() {
								if r := recover(); r != nil {
									t.Fatalf("%s rev %d fam %s len %d %s: panic %v", name, rev, fam, n, fill, r)
								}
							}()
							d(newBuilder(fam))
						}()
					}
				}
			}
		}
	}
}

var fuzzXTNames = []string{"tcp", "udp", "icmp", "icmp6", "multiport", "comment", "conntrack", "state", "mark",
	"connmark", "owner", "addrtype", "set", "REDIRECT", "DNAT", "SNAT", "MASQUERADE", "TPROXY", "MARK", "CONNMARK",
	"REJECT", "LOG", "mangle", "CLASSIFY", ""}

// FuzzLegacyText: a legacy rule of any fixed match, matches and target
// (names chosen among those decoded, revisions and data any) renders as
// one printable line, never a panic.
func FuzzLegacyText(f *testing.F) {
	f.Add(make([]byte, 84), []byte{0, 0, 12, 1, 0}, "INPUT", "ACCEPT", false)
	f.Add(make([]byte, 164), []byte{24, 1, 8, 0xff}, "OUTPUT", "?", true)
	f.Fuzz(func(t *testing.T, head, exts []byte, chain, verdict string, jump bool) {
		fams := []inspect.Family{inspect.IP, inspect.IP6, inspect.ARP}
		r := inspect.LegacyRule{Family: fams[len(head)%3], Chain: chain, Head: head, Verdict: verdict, Goto: jump}
		for len(exts) >= 3 {
			sel, rev, n := int(exts[0]), exts[1], int(exts[2])
			exts = exts[3:]
			n = min(n, len(exts))
			x := inspect.XTExt{Name: fuzzXTNames[sel%len(fuzzXTNames)], Rev: rev % 4, Data: exts[:n]}
			exts = exts[n:]
			if sel >= 128 {
				r.Target = x
			} else {
				r.Matches = append(r.Matches, x)
			}
		}
		got := LegacyText(r)
		if !strings.HasPrefix(got, "-A ") {
			t.Fatalf("text %q lacks the -A head", got)
		}
		for _, c := range []byte(got) {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("text %q holds byte %#x", got, c)
			}
		}
	})
}
