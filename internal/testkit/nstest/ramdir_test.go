package nstest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSweepRAMDirs: a dead binary's tmpfs directories go, a live one's
// and names that are not ours stay.
func TestSweepRAMDirs(t *testing.T) {
	shm, dir := t.TempDir(), t.TempDir()
	live, gone := "0badc0de", "deadbeef"
	liveOwner(t, dir, live)
	names := map[string]bool{ // name: swept
		"iptalert-" + live + "-00000001": false,
		"iptalert-" + gone + "-00000002": true, // no lock file: swept before, partly
		"iptalert-demo-dirty-3":          false,
		"other-" + gone + "-00000004":    false,
	}
	for n := range names {
		if err := os.MkdirAll(filepath.Join(shm, n, "etcd0"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sweepRAMDirs(shm, dir)
	for n, swept := range names {
		_, err := os.Stat(filepath.Join(shm, n))
		if gotSwept := os.IsNotExist(err); gotSwept != swept {
			t.Errorf("%s: swept %v, want %v (%v)", n, gotSwept, swept, err)
		}
	}
}

// TestRAMDir: as root the directory is on tmpfs and named for the sweep;
// it is gone after the test.
func TestRAMDir(t *testing.T) {
	NeedRoot(t)
	var path string
	t.Run("make", func(t *testing.T) {
		path = RAMDir(t)
		var st unix.Statfs_t
		if err := unix.Statfs(path, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			t.Errorf("%s: not on tmpfs (type %#x, %v)", path, st.Type, err)
		}
		if tag, ok := ownerOf(filepath.Base(path)); filepath.Dir(path) != shmDir || !ok || tag != Owner() {
			t.Errorf("%s: want a name of New's in %s, owner %s", path, shmDir, Owner())
		}
		if err := os.WriteFile(filepath.Join(path, "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s still there after its test: %v", path, err)
	}
}
