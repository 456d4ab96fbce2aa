package nstest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// A kubelet sets global sysctls at its start (vm.overcommit_memory,
// kernel.panic, ...): the host's, whatever netns it runs in. SaveSysctls
// puts them back when the test ends; a binary that dies first cannot, so
// what it saved is also written to ownerDir/OWNER.sysctl-N, and the next
// binary's sweep (sweepLeftovers) writes it back once OWNER is gone.

// procSys is where the sysctls are (a test's own dir in the sweep's test).
var procSys = "/proc/sys"

// sysctlSaves numbers this binary's saves, so that each has its file.
var sysctlSaves atomic.Int64

// SaveSysctls saves the global sysctls keys (dotted names) and restores
// them when the test ends, failed or not, then checks they are back.
func SaveSysctls(t testing.TB, keys ...string) {
	t.Helper()
	tag, err := ownerTag()
	if err != nil {
		t.Fatalf("save sysctls: no owner tag: %v", err)
	}
	saved := map[string]string{}
	for _, k := range keys {
		if b, err := os.ReadFile(sysctlPath(k)); err == nil {
			saved[k] = string(b)
		}
	}
	file := filepath.Join(ownerDir, tag+".sysctl-"+strconv.FormatInt(sysctlSaves.Add(1), 10))
	if err := writeSaved(file, saved); err != nil {
		t.Fatalf("save sysctls: %v", err)
	}
	t.Cleanup(func() {
		for k, v := range saved {
			if b, _ := os.ReadFile(sysctlPath(k)); string(b) != v {
				t.Logf("restoring %s: %q, was %q", k, strings.TrimSpace(string(b)), strings.TrimSpace(v))
			}
		}
		for _, err := range restoreSysctls(saved) {
			t.Error(err)
		}
		_ = os.Remove(file)
	})
}

// writeSaved writes the saved values to file (in ownerDir, root's own,
// 0700: no link planted there to follow).
func writeSaved(file string, saved map[string]string) error {
	b, err := json.Marshal(saved)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o600)
}

// restoreSysctls writes the saved values back and reads each again.
func restoreSysctls(saved map[string]string) []error {
	var errs []error
	for k, v := range saved {
		_ = os.WriteFile(sysctlPath(k), []byte(v), 0o644)
		if b, err := os.ReadFile(sysctlPath(k)); err != nil || string(b) != v {
			errs = append(errs, fmt.Errorf("sysctl %s = %q after restore, want %q (%v)", k, b, v, err))
		}
	}
	return errs
}

// sweepSysctls writes back what the owners in dir that are gone saved,
// and removes their files; an owner's first save last, so the values from
// before its first kubelet are the ones left. A file that cannot be
// restored in full is kept for the next sweep.
func sweepSysctls(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.sysctl-*"))
	type save struct {
		file string
		n    int
	}
	var gone []save
	for _, f := range files {
		tag, num, _ := strings.Cut(filepath.Base(f), ".sysctl-")
		n, err := strconv.Atoi(num)
		if err != nil || tag == owner.tag || !ownerGoneIn(dir, tag) {
			continue
		}
		gone = append(gone, save{f, n})
	}
	slices.SortFunc(gone, func(a, b save) int { return b.n - a.n })
	for _, s := range gone {
		b, err := os.ReadFile(s.file)
		saved := map[string]string{}
		if err != nil || json.Unmarshal(b, &saved) != nil {
			_ = os.Remove(s.file) // torn: nothing to restore from it
			continue
		}
		if len(restoreSysctls(saved)) == 0 {
			_ = os.Remove(s.file)
		}
	}
}

func sysctlPath(k string) string {
	return filepath.Join(procSys, strings.ReplaceAll(k, ".", "/"))
}
