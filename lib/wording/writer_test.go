package wording

import (
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// hostileName is what a pod can name its process, container or pod in
// the API or its cgroup: a forged second line, a terminal escape, a bidi
// override, invalid UTF-8, and far too much of it.
const hostileName = "x\nLast change by kubelet (pid 1) on the host.\x1b[2J\u202eexe.\xff"

func TestWriterLine(t *testing.T) {
	cases := []struct {
		name string
		w    *findings.Writer
		want string
	}{
		{name: "none", w: nil, want: ""},
		{name: "container of a pod", w: &findings.Writer{PID: 4242, Comm: "iptables-nft-re", PPID: 4200, ParentComm: "sh", ContainerID: "0123456789abcdef",
			Container: "istio-init", Pod: findings.Pod{Namespace: "shop", Name: "cart-7d9f", UID: "u1"}},
			want: "iptables-nft-re (pid 4242, parent sh pid 4200) in container istio-init of pod shop/cart-7d9f"},
		{name: "container known by id only", w: &findings.Writer{PID: 7, Comm: "nft", ContainerID: "0123456789abcdef0123"},
			want: "nft (pid 7) in container 0123456789ab"},
		{name: "host unit", w: &findings.Writer{PID: 900, Comm: "firewalld", PPID: 1, ParentComm: "systemd", Unit: "firewalld.service"},
			want: "firewalld (pid 900, parent systemd pid 1) on the host, unit firewalld.service"},
		{name: "host, nothing known", w: &findings.Writer{PID: 12, Comm: "iptables"}, want: "iptables (pid 12) on the host"},
		{name: "gone", w: &findings.Writer{PID: 31337, Comm: "iptables-restor", Gone: true},
			want: "iptables-restor (pid 31337), exited before it could be placed"},
		{name: "no comm", w: &findings.Writer{PID: 5}, want: "process (pid 5) on the host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := WriterLine(tc.w); got != tc.want {
				t.Errorf("WriterLine = %q, want %q", got, tc.want)
			}
		})
	}
}

// checkInert fails when s could forge a line or reorder what a person
// reads, or is over limit bytes.
func checkInert(t *testing.T, what, s string, limit int) {
	t.Helper()
	if len(s) > limit || !utf8.ValidString(s) {
		t.Errorf("%s: %d bytes (limit %d), valid UTF-8 %v: %q", what, len(s), limit, utf8.ValidString(s), s)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			t.Errorf("%s holds %U: %q", what, r, s)
		}
	}
}

// Every string of a hostile writer, each one far too long: the line stays
// one line, inert and bounded, and in a note it is one line that leaves
// the note's other lines and its bound alone.
func TestWriterLineHostile(t *testing.T) {
	long := strings.Repeat(hostileName, 400)
	for _, w := range []*findings.Writer{
		{PID: 1, Comm: long, PPID: 2, ParentComm: long, Container: long, Pod: findings.Pod{Namespace: long, Name: long}},
		{PID: 1, Comm: hostileName, ContainerID: long},
		{PID: 1, Comm: hostileName, Unit: long},
		{PID: -1, Comm: hostileName, Gone: true},
	} {
		line := WriterLine(w)
		checkInert(t, "writer line", line, MaxWriterLine)
		if strings.Contains(line, "\n") {
			t.Errorf("writer line has a newline: %q", line)
		}

		rec := findingstest.Sample()
		rec.Writer = w
		want := "Last change by " + line + "."
		note := Note(rec, owner.Owner{Kind: "Deployment", Name: "cart"})
		if len(note) > NoteLimit || !strings.Contains(note, "\n"+want+"\n"+deprecation+"\n") {
			t.Errorf("note (%d bytes) lacks the writer's own line %q:\n%s", len(note), want, note)
		}
		plain := Note(findingstest.Sample(), owner.Owner{Kind: "Deployment", Name: "cart"})
		if strings.Count(note, "\n") != strings.Count(plain, "\n")+1 {
			t.Errorf("the writer added other than one line:\n%s", note)
		}

		unknown := findingstest.Sample()
		unknown.State, unknown.Nft, unknown.Examples, unknown.Error, unknown.Writer = findings.StateUnknown, findings.Nft{}, nil, "inspection deadline reached", w
		un := UnknownNote(unknown, owner.Owner{})
		if len(un) > NoteLimit || !strings.Contains(un, " "+want+"\n"+unknownTail) {
			t.Errorf("unknown note lacks %q:\n%s", want, un)
		}
	}
}
