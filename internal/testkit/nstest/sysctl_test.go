package nstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeSysctls points procSys at a dir of the test's holding keys, each
// set to its value, until the test ends.
func fakeSysctls(t *testing.T, values map[string]string) {
	t.Helper()
	root := t.TempDir()
	old := procSys
	procSys = root
	t.Cleanup(func() { procSys = old })
	for k, v := range values {
		setSysctl(t, k, v)
	}
}

func setSysctl(t *testing.T, k, v string) {
	t.Helper()
	p := sysctlPath(k)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sysctl(t *testing.T, k string) string {
	t.Helper()
	b, err := os.ReadFile(sysctlPath(k))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSweepSysctls: what a dead binary saved is written back, its first
// save's values last; a live binary's saves are left alone, a torn file
// is dropped, and a file that cannot be restored in full is kept.
func TestSweepSysctls(t *testing.T) {
	fakeSysctls(t, map[string]string{"kernel.panic": "10\n", "vm.overcommit_memory": "1\n", "vm.panic_on_oom": "1\n"})
	dir := t.TempDir()
	const dead, torn, alive = "0000dead", "0000beef", "0000a11e"
	write := func(name string, saved map[string]string) string {
		f := filepath.Join(dir, name)
		if err := writeSaved(f, saved); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// The dead binary's kubelets ran twice: its second save holds the
	// first kubelet's values.
	first := write(dead+".sysctl-1", map[string]string{"kernel.panic": "0\n", "vm.overcommit_memory": "0\n"})
	second := write(dead+".sysctl-2", map[string]string{"kernel.panic": "10\n", "vm.overcommit_memory": "1\n"})
	// A key this kernel does not have (a dir of the fake tree missing).
	unrestorable := write(dead+".sysctl-3", map[string]string{"no.such.key": "1\n"})
	if err := os.WriteFile(filepath.Join(dir, torn+".sysctl-1"), []byte(`{"kernel.pan`), 0o600); err != nil {
		t.Fatal(err)
	}
	// The live one holds its lock, as a running binary does.
	lock, err := os.OpenFile(filepath.Join(dir, alive), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	live := write(alive+".sysctl-1", map[string]string{"vm.panic_on_oom": "0\n"})

	sweepSysctls(dir)

	for k, want := range map[string]string{"kernel.panic": "0\n", "vm.overcommit_memory": "0\n", "vm.panic_on_oom": "1\n"} {
		if got := sysctl(t, k); got != want {
			t.Errorf("%s = %q after the sweep, want %q", k, got, want)
		}
	}
	for f, want := range map[string]bool{first: false, second: false, filepath.Join(dir, torn+".sysctl-1"): false, unrestorable: true, live: true} {
		if _, err := os.Stat(f); (err == nil) != want {
			t.Errorf("%s kept %t, want %t", filepath.Base(f), err == nil, want)
		}
	}
}

// TestSaveSysctls: a save is on disk while its test runs, for a sweep
// to restore if the binary dies, and gone once the test has put the
// values back.
func TestSaveSysctls(t *testing.T) {
	NeedRoot(t)
	fakeSysctls(t, map[string]string{"kernel.panic": "0\n"})
	var file string
	t.Run("kubelet", func(t *testing.T) {
		SaveSysctls(t, "kernel.panic", "kernel.absent")
		files, _ := filepath.Glob(filepath.Join(ownerDir, Owner()+".sysctl-*"))
		for _, f := range files {
			if b, _ := os.ReadFile(f); strings.Contains(string(b), `"kernel.panic":"0\n"`) {
				file = f
			}
		}
		if file == "" {
			t.Errorf("no save holding kernel.panic in %v", files)
		}
		setSysctl(t, "kernel.panic", "10\n")
	})
	if got := sysctl(t, "kernel.panic"); got != "0\n" {
		t.Errorf("kernel.panic = %q after the test, want %q", got, "0\n")
	}
	if _, err := os.Stat(file); file != "" && err == nil {
		t.Errorf("%s left after the test", file)
	}
}
