package inspect

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestLegacyAbsent: the exec watch calls a failed legacy write missing
// kernel support by it. The x_tables families answer as the looks do
// (their /proc/net names file, present in every netns while the module
// is); ebtables, which has none, by /sys/module, and not at all when
// that cannot be read.
func TestLegacyAbsent(t *testing.T) {
	for _, lf := range legacyFamilies {
		_, err := os.Stat("/proc/self/net/" + lf.names)
		if got, want := LegacyAbsent(lf.fam), errors.Is(err, os.ErrNotExist); got != want {
			t.Errorf("%s: absent %v, its names file says %v", lf.fam, got, want)
		}
	}
	old := sysModule
	t.Cleanup(func() { sysModule = old })
	dir := t.TempDir()
	sysModule = filepath.Join(dir, "module")
	if LegacyAbsent(Bridge) {
		t.Error("ebtables absent without a /sys/module to tell")
	}
	if err := os.Mkdir(sysModule, 0o755); err != nil {
		t.Fatal(err)
	}
	if !LegacyAbsent(Bridge) {
		t.Error("ebtables not absent from an empty /sys/module")
	}
	if err := os.Mkdir(filepath.Join(sysModule, "ebtables"), 0o755); err != nil {
		t.Fatal(err)
	}
	if LegacyAbsent(Bridge) {
		t.Error("ebtables absent though loaded")
	}
	if LegacyAbsent(INet) {
		t.Error("a family without legacy tables said absent")
	}
}
