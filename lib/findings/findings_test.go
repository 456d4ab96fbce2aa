package findings

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
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
	for _, want := range []string{`"tables":[]`, `"per_table":[]`, `"allowlist_entries":[]`, `"examples":[]`, `"vendors":[]`, `"worst":""`, `"impact":{"legacy":0,"xt":0,"native":0}`, `"schema":"iptables-alerter/v1"`, `"writer":null`} {
		if !bytes.Contains(line, []byte(want)) {
			t.Errorf("line lacks %s: %s", want, line)
		}
	}
	back, err := Parse(line[:len(line)-1])
	if err != nil || back.Pod.Name != "evil\n{\"schema\":\"x\"}\u2028\ufffd" {
		t.Fatalf("round trip: %v %q", err, back.Pod.Name)
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

// TestModulesLeftOut: a module list cut at MaxModules says so in the
// line, on top of what the writer's lists already left out.
func TestModulesLeftOut(t *testing.T) {
	var xt []string
	for i := range MaxModules + 6 {
		xt = append(xt, fmt.Sprintf("xt_m%02d", i))
	}
	b := Modules{Xt: xt, LeftOut: 2}.bounded()
	if len(b.Xt) != MaxModules || b.LeftOut != 8 || b.Legacy == nil || b.Native == nil {
		t.Errorf("bounded: %d xt names, %d left out, legacy %v, native %v; want %d, 8, [] and []", len(b.Xt), b.LeftOut, b.Legacy, b.Native, MaxModules)
	}
}
