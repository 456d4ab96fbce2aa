package findings

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

func TestSummarizeFingerprint(t *testing.T) {
	u := classify.Usage{
		Chains: []classify.Chain{
			{Family: inspect.IP, Table: "nat", Name: "OUTPUT", Rules: 2, Sum: 7},
			{Family: inspect.IP, Table: "nat", Name: "X", User: true},
			// Emptied by the allowlist: not counted, not in the tables.
			{Family: inspect.IP, Table: "filter", Name: "OUTPUT"},
		},
		Legacy: []classify.Legacy{{Family: inspect.IP6, Table: "filter", Rules: 1}},
	}
	nft, legacy, fp, cut := Summarize(u)
	if nft.Chains != 2 || nft.Rules != 2 || strings.Join(nft.Tables, ",") != "ip nat" || legacy.Rules != 1 || cut {
		t.Fatalf("Summarize = %+v %+v cut=%v", nft, legacy, cut)
	}
	if _, _, again, _ := Summarize(u); again != fp {
		t.Error("same usage, different fingerprint")
	}
	changed := u
	changed.Chains = append([]classify.Chain(nil), u.Chains...)
	changed.Chains[0].Sum = 8
	if _, _, other, _ := Summarize(changed); other == fp {
		t.Error("changed rules, same fingerprint")
	}
	// Field boundaries are length-prefixed: moving bytes between table and
	// chain names must change the fingerprint.
	a := classify.Usage{Chains: []classify.Chain{{Family: inspect.IP, Table: "ab", Name: "c", User: true}}}
	b := classify.Usage{Chains: []classify.Chain{{Family: inspect.IP, Table: "a", Name: "bc", User: true}}}
	if _, _, fa, _ := Summarize(a); func() bool { _, _, fb, _ := Summarize(b); return fa == fb }() {
		t.Error("shifted names collide")
	}
}

func TestSummarizeBoundsHostileTables(t *testing.T) {
	var u classify.Usage
	for i := 0; i < 100; i++ {
		u.Chains = append(u.Chains, classify.Chain{Family: inspect.INet, Table: strings.Repeat("x", 200) + string(rune('A'+i%26)) + strings.Repeat("y", i), Name: "c", Rules: 1})
	}
	nft, _, _, cut := Summarize(u)
	if len(nft.Tables) != maxTables || !cut {
		t.Fatalf("%d tables, cut=%v; want %d and cut", len(nft.Tables), cut, maxTables)
	}
	for _, tb := range nft.Tables {
		if len(tb) > len("inet ")+maxName+len("…") {
			t.Fatalf("table name not capped: %d bytes", len(tb))
		}
	}
}

func TestEncodeOneLine(t *testing.T) {
	rec := Record{Pod: Pod{Name: "evil\n{\"schema\":\"x\"}\u2028\xff"}, Fingerprint: "f"}
	line, err := Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
		t.Fatalf("not one line: %q", line)
	}
	for _, want := range []string{`"tables":[]`, `"allowlist_entries":[]`, `"examples":[]`, `"schema":"iptables-alerter/v1"`} {
		if !bytes.Contains(line, []byte(want)) {
			t.Errorf("line lacks %s: %s", want, line)
		}
	}
	back, err := Parse(line[:len(line)-1])
	if err != nil || back.Pod.Name != "evil\n{\"schema\":\"x\"}\u2028\ufffd" {
		t.Fatalf("round trip: %v %q", err, back.Pod.Name)
	}
}

func TestAppendRotates(t *testing.T) {
	dir := t.TempDir()
	l := Log{Path: filepath.Join(dir, "sub", "findings.jsonl"), MaxBytes: 1200}
	for i := 0; i < 5; i++ {
		if err := l.Append(context.Background(), Record{Fingerprint: "f", ContainerID: strings.Repeat("c", 100) + string(rune('0'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	cur, _ := os.ReadFile(l.Path)
	old, _ := os.ReadFile(l.Path + ".1")
	lines := bytes.Count(cur, []byte("\n")) + bytes.Count(old, []byte("\n"))
	if len(cur) > 1200 || len(old) == 0 || lines < 3 {
		t.Fatalf("after rotation: current %d bytes, .1 %d bytes, %d lines", len(cur), len(old), lines)
	}
	if fi, _ := os.Stat(filepath.Dir(l.Path)); fi.Mode().Perm() != 0o750 {
		t.Errorf("directory mode %v, want 0750", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(l.Path); fi.Mode().Perm() != 0o640 {
		t.Errorf("file mode %v, want 0640", fi.Mode().Perm())
	}
}

func TestAppendRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "findings.jsonl")
	if err := mkfifo(p); err != nil {
		t.Skip("no mkfifo:", err)
	}
	// O_NONBLOCK: the open fails at once (no reader) instead of hanging.
	err := Log{Path: p}.Append(context.Background(), Record{Fingerprint: "f"})
	if err == nil {
		t.Fatal("Append wrote into a FIFO")
	}
}
