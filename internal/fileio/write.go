package fileio

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// WriteFile replaces path with data so that a reader, or the next start
// after a crash, sees either the old or the new content, never a mix: a
// temp file in the same directory, fsync, rename, fsync of the directory.
// The temp file is created with O_EXCL|O_NOFOLLOW so a planted symlink
// cannot redirect the write; rename replaces a symlink at path instead of
// following it. The temp name starts with a dot and does not end like
// path, so a reader globbing "*.prom" never sees it.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	removeStale(dir, filepath.Base(path))
	b := make([]byte, tmpRandom)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	tmp := filepath.Join(dir, tmpPrefix(filepath.Base(path))+hex.EncodeToString(b))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	// The umask may have taken bits away; the caller's mode is the intent.
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("chmod %q: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %q: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %q: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %q: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %q: %w", tmp, err)
	}
	ok = true
	// The rename is only durable once the directory entry is on disk.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %q: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %q: %w", dir, err)
	}
	return nil
}

// tmpRandom is how many random bytes name a temp file (hex in the name).
const tmpRandom = 6

// tmpPrefix starts the names of base's temp files.
func tmpPrefix(base string) string { return "." + base + ".tmp-" }

// staleAfter is how old a temp file of base must be before WriteFile takes
// it for what a write killed midway left: a write takes milliseconds.
const staleAfter = time.Minute

// swept holds the paths whose stale temp files this process removed.
var swept sync.Map

// removeStale removes, once a path and process, the temp files of base
// that a WriteFile killed between their creation and the rename left
// (SIGKILL, the OOM killer), those over staleAfter old. A consumer killed
// in a loop otherwise gathered one beside its checkpoint at each kill that
// fell inside a save (TestPropertyCrashRestarts' directory held about
// twenty). Errors are ignored: the write itself does not depend on it.
func removeStale(dir, base string) {
	if _, done := swept.LoadOrStore(filepath.Join(dir, base), true); done {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := tmpPrefix(base)
	for _, e := range ents {
		name := e.Name()
		random, ok := strings.CutPrefix(name, prefix)
		if !ok || len(random) != 2*tmpRandom {
			continue
		}
		if _, err := hex.DecodeString(random); err != nil {
			continue
		}
		// Info is an lstat: a symlink of that name is removed, not followed.
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < staleAfter {
			continue
		}
		_ = os.Remove(filepath.Join(dir, name))
	}
}
