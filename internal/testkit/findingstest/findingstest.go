// Package findingstest reads a findings file in tests, strictly: every line
// must parse and the file must not end inside a line, because a torn or
// unparsable line is exactly what the writers promise never to leave.
package findingstest

import (
	"bufio"
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Read returns the records of the findings file at path, none when it does
// not exist.
func Read(t testing.TB, path string) []findings.Record {
	t.Helper()
	var data []byte
	// A read beside a writer's append may see part of its line: a read
	// is not atomic with a write on a regular file. The line a writer
	// left torn stays torn, so only a partial line still there a second
	// later fails.
	for deadline := time.Now().Add(time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		data, err = os.ReadFile(path)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			t.Fatalf("read findings: %v", err)
		}
		if len(data) == 0 || data[len(data)-1] == '\n' || time.Now().After(deadline) {
			break
		}
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("findings file %s ends with a partial line: %q", path, data[bytes.LastIndexByte(data, '\n')+1:])
	}
	var recs []findings.Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	// Far above the record bound, so an oversized line fails in Parse, not here.
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		rec, err := findings.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("findings line %q does not parse: %v", sc.Text(), err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read findings %s: %v", path, err)
	}
	return recs
}

// Sample is a present record of an Istio init container: two example
// rules in ip nat, no vendors, no writer; tests change what they check.
func Sample() findings.Record {
	return findings.Record{
		Schema:      findings.Schema,
		Node:        "node-a",
		ContainerID: "c0ffee",
		SandboxID:   "5a4db0c5",
		Pod:         findings.Pod{Namespace: "shop", Name: "cart-7d9f", UID: "0b6f8e2c-2a3b-4a51-9d7e-111111111111"},
		Container:   "istio-init",
		Image:       "docker.io/istio/proxyv2:1.20.0",
		Nft:         findings.Nft{Tables: []string{"ip nat"}, Chains: 4, Rules: 12},
		Fingerprint: "f1f2f3",
		Examples: []findings.Example{
			{Family: "ip", Table: "nat", Chain: "PREROUTING", Rule: "-A PREROUTING -p tcp -j ISTIO_INBOUND"},
			{Family: "ip", Table: "nat", Chain: "OUTPUT", Rule: "-A OUTPUT -p tcp -j ISTIO_OUTPUT"},
		},
	}
}
