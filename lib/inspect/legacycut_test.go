package inspect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// TestLegacyCut: a table whose entries are over the read cap is read up to
// the cap (the kernel's copy stops where the buffer's memory ends), its
// whole entries before the cut are its first rules, and the table says it
// was cut; a table under the cap with more rules than the rule bound hands
// on the bound's worth and says so too. ReadState gives no State for the
// table over the cap.
func TestLegacyCut(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy-restore")
	ns := nstest.New(t)
	comment := strings.Repeat("c", 255)
	var b strings.Builder
	b.WriteString("*filter\n")
	const n = 10000 // 488 bytes each: over 4 MiB
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "-A INPUT -p tcp --dport %d -m comment --comment %s -j ACCEPT\n", i%65536, comment)
	}
	b.WriteString("COMMIT\n*nat\n")
	for i := 0; i < 2*maxLegacyRules; i++ {
		fmt.Fprintf(&b, "-A OUTPUT -p tcp --dport %d -j RETURN\n", i)
	}
	b.WriteString("COMMIT\n")
	ns.Restore(b.String(), "iptables-legacy-restore")
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ip := legacyFamilies[0]
	err = h.Do(func() error {
		_, info, err := getInfo(ip, "filter")
		if err != nil {
			return err
		}
		// Errors, not t.Fatal: this runs on Do's locked thread.
		if info.size <= MaxLegacyEntriesBytes {
			return fmt.Errorf("filter is %d bytes, want over the cap", info.size)
		}
		blob, cut, err := readEntries(ip, "filter", info.size)
		if err != nil || !cut || len(blob) > MaxLegacyEntriesBytes+4096 || len(blob) < MaxLegacyEntriesBytes {
			return fmt.Errorf("read over the cap: %d bytes, cut %v, %v", len(blob), cut, err)
		}
		got := 0
		var bad error
		_, complete := walkEntries(IP, "filter", blob, info.hooks, func(r LegacyRule) bool {
			port := -1
			if len(r.Matches) == 2 && len(r.Matches[0].Data) >= 6 {
				port = int(r.Matches[0].Data[4]) | int(r.Matches[0].Data[5])<<8
			}
			if r.Chain != "INPUT" || r.Verdict != "ACCEPT" || port != got%65536 {
				bad = fmt.Errorf("rule %d: port %d, %+v", got, port, r)
				return false
			}
			got++
			return true
		})
		if bad != nil {
			return bad
		}
		if complete || got < MaxLegacyEntriesBytes/488-1 || got >= n {
			return fmt.Errorf("walked %d of %d rules, complete %v", got, n, complete)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var tables []LegacyTable
	rules := 0
	if err := readLegacy(h, []legacyFamily{ip}, legacySink{
		table: func(t LegacyTable) { tables = append(tables, t) },
		rule:  func(LegacyRule) { rules++ },
	}); err != nil {
		t.Fatal(err)
	}
	if rules != maxLegacyRules {
		t.Errorf("%d rules handed on, want the bound %d", rules, maxLegacyRules)
	}
	for _, tb := range tables {
		if tb.Name != "filter" && tb.Name != "nat" {
			continue
		}
		if !tb.Cut {
			t.Errorf("table %s not cut", tb.Name)
		}
	}
	// No State for a table over the cap: a re-sweep never takes it as
	// unchanged.
	if _, err := ReadState(context.Background(), h); !errors.Is(err, ErrTooBig) {
		t.Errorf("ReadState with a table over the cap: %v, want ErrTooBig", err)
	}
}
