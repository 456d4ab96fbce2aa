package findings

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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

func TestHasUsage(t *testing.T) {
	tests := []struct {
		name string
		rec  Record
		want bool
	}{
		{name: "error only", rec: Record{Error: "deadline"}},
		{name: "nft rules", rec: Record{Nft: Nft{Rules: 1}}, want: true},
		{name: "nft user chain", rec: Record{Nft: Nft{Chains: 1}}, want: true},
		{name: "nft table only", rec: Record{Nft: Nft{Tables: []string{"ip nat"}}}, want: true},
		{name: "legacy rules", rec: Record{Legacy: Legacy{Rules: 2}}, want: true},
		{name: "legacy table only", rec: Record{Legacy: Legacy{Tables: []string{"ip filter"}}}, want: true},
		{name: "empty lists", rec: Record{Nft: Nft{Tables: []string{}}, Legacy: Legacy{Tables: []string{}}}},
	}
	for _, tt := range tests {
		if got := tt.rec.HasUsage(); got != tt.want {
			t.Errorf("%s: HasUsage = %v, want %v", tt.name, got, tt.want)
		}
	}
}
