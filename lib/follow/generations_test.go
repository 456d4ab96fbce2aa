package follow

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// One pod whose names and comments make huge findings, restarting its
// containers with changing rules, used to rotate every other pod's findings
// away while the consumer was down (issue: 621 KB findings, 24 of 150
// Events). With the record bound, the per-sandbox limit and rotation
// generations that the follower finishes in order, the consumer that comes
// back finds every other pod's finding.
func TestHostilePodCannotRotateOthersAway(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "findings.jsonl")
	// The five files hold the hostile pod's limit of MaxRecordBytes lines
	// and the other pods' lines (about 1 KiB each since the exec, modules
	// and mixed_backends fields), and still rotate at least three times.
	log := findings.Log{Path: path, MaxBytes: 40 << 10, Generations: 4}
	seen := findings.Seen{Dir: filepath.Join(dir, "run")}
	ctx := context.Background()
	record := func(sandbox string, rec findings.Record) {
		t.Helper()
		_, err := seen.RecordFinding(ctx, sandbox, findings.Record{Fingerprint: rec.Fingerprint, State: findings.StatePresent}, findings.Parts{}, func() error { return log.Append(ctx, rec) })
		if err != nil {
			t.Fatal(err)
		}
	}
	hostile := func(i int) findings.Record {
		r := findings.Record{Time: findings.Now(), Pod: findings.Pod{Namespace: "evil", Name: "flood", UID: "u-evil"},
			Nft: findings.Nft{Rules: 100000 + i}, Fingerprint: fmt.Sprintf("evil-%d", i)}
		for k := 0; k < 1000; k++ {
			r.Nft.Tables = append(r.Nft.Tables, "inet "+strings.Repeat("t", 250)+fmt.Sprint(k))
		}
		for k := 0; k < 100; k++ {
			r.Examples = append(r.Examples, findings.Example{Family: "ip", Table: "nat", Chain: strings.Repeat("C", 200), Rule: strings.Repeat("-m comment --comment x ", 300)})
		}
		return r
	}
	const others = 150
	// The consumer reads what is there, then is down.
	f := New(path, FileStore(filepath.Join(dir, "checkpoint.json")))
	got := map[string]int{}
	handle := func(_ context.Context, line []byte) error {
		r, err := findings.Parse(line)
		if err != nil {
			return fmt.Errorf("line %q: %w", line, err)
		}
		got[r.Pod.UID]++
		return nil
	}
	if err := f.Once(ctx, handle); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < others; i++ {
		// Forty container starts of the hostile pod spread among the rest.
		if i%4 == 0 && i/4 < 40 {
			record("sandbox-evil", hostile(i/4))
		}
		uid := fmt.Sprintf("u-%03d", i)
		record("sandbox-"+uid, findings.Record{Time: findings.Now(), Pod: findings.Pod{Namespace: "shop", Name: "pod-" + uid, UID: uid},
			Nft: findings.Nft{Tables: []string{"ip nat"}, Rules: 3}, Fingerprint: "fp-" + uid,
			Examples: []findings.Example{{Family: "ip", Table: "nat", Chain: "OUTPUT", Rule: "-A OUTPUT -p tcp -j REDIRECT --to-ports 15001"}}})
	}
	if _, err := os.Stat(path + ".3"); err != nil {
		t.Fatalf("the file was rotated fewer than three times while the consumer was down: %v", err)
	}
	start := time.Now()
	if err := f.Once(ctx, handle); err != nil {
		t.Fatal(err)
	}
	var lost []string
	for i := 0; i < others; i++ {
		if uid := fmt.Sprintf("u-%03d", i); got[uid] != 1 {
			lost = append(lost, fmt.Sprintf("%s:%d", uid, got[uid]))
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d other pods' findings not delivered exactly once: %v", len(lost), others, lost)
	}
	if got["u-evil"] != findings.DefaultLimit {
		t.Errorf("hostile pod delivered %d findings, want its limit %d", got["u-evil"], findings.DefaultLimit)
	}
	t.Logf("caught up in %v", time.Since(start))
}

// A rotation renames PATH.1 to PATH.2, then PATH to PATH.1; a listing taken
// between the two renames lacks PATH.1. Files opened from that listing once
// the rotation was over skipped a generation: the follower, not finding the
// file it was in, went on after it and lost that file's last lines (the
// property test lost one line this way under load). Every set openAll gives
// while a writer rotates as fast as it can must be consecutive generations.
func TestOpenAllDuringRotationsSkipsNoGeneration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "findings.jsonl")
	const gens = 3
	writeGen := func(k int) {
		if err := os.WriteFile(path, []byte(fmt.Sprintf("%d\n", k)), 0o644); err != nil {
			t.Error(err)
		}
	}
	writeGen(0)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			for g := gens - 1; g >= 1; g-- {
				_ = os.Rename(fmt.Sprintf("%s.%d", path, g), fmt.Sprintf("%s.%d", path, g+1))
			}
			if err := os.Rename(path, path+".1"); err != nil {
				t.Error(err)
				return
			}
			writeGen(k)
		}
	}()
	defer func() { close(stop); <-done }()
	var sets, errs int
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		files, err := openAll(path)
		if err != nil {
			errs++ // rotated at each try: allowed, Run retries
			continue
		}
		var got []int
		for _, x := range files {
			b := make([]byte, 32)
			n, _ := x.ReadAt(b, 0)
			k, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			if err != nil {
				k = -1 // the writer's new file, still empty
			}
			got = append(got, k)
		}
		closeAll(files)
		sets++
		for i := 1; i < len(got); i++ {
			if got[i] >= 0 && got[i] != got[i-1]+1 {
				t.Fatalf("openAll gave generations %v: not one moment (set %d)", got, sets)
			}
		}
	}
	t.Logf("%d consistent sets, %d times rotated at every try", sets, errs)
	if sets < 100 {
		t.Errorf("only %d sets taken", sets)
	}
}
