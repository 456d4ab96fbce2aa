package nstest

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// shmDir is the tmpfs RAMDir makes its directories in.
const shmDir = "/dev/shm"

// RAMDir is a directory on tmpfs, removed when the test ends, for the
// data of a server whose reads wait on its fsyncs: etcd's raft loop
// blocks on every WAL fdatasync, and its linearizable reads (every list
// kube-apiserver sends it) wait behind that loop. On the shared disk a
// compiler or another test's image unpack stalled such an fsync for
// seconds (CI once had a list of Reports hang 30 s); on tmpfs an fsync
// is a no-op, so a busy disk cannot decide a test's verdict.
//
// Without root (no owner tag) or without a tmpfs /dev/shm, it is
// t.TempDir(). Its name is NewName's, so a dead binary's directories are
// swept by the next one as its namespaces are (sweepRAMDirs).
func RAMDir(t testing.TB) string {
	t.Helper()
	var st unix.Statfs_t
	if Owner() == "" || unix.Statfs(shmDir, &st) != nil || st.Type != unix.TMPFS_MAGIC {
		return t.TempDir()
	}
	dir := filepath.Join(shmDir, NewName(t))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("make a tmpfs directory: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// sweepRAMDirs removes the RAMDir directories in shm of binaries that are
// gone (their owner lock in dir is free or missing).
func sweepRAMDirs(shm, dir string) {
	ents, _ := os.ReadDir(shm)
	for _, e := range ents {
		if tag, ok := ownerOf(e.Name()); ok && tag != owner.tag && ownerGoneIn(dir, tag) {
			_ = os.RemoveAll(filepath.Join(shm, e.Name()))
		}
	}
}
