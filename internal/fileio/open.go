package fileio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrLinked is returned for a file with more than one hard link: a link
// planted in our directory to a file elsewhere (/etc/shadow) must not be
// written through.
var ErrLinked = errors.New("file has other hard links")

// looseBits are taken away from what the hook writes: a directory or file
// pre-created group- or world-writable would let anyone forge or delete
// findings, and set-id bits have no business there.
const looseBits = 0o022 | unix.S_ISUID | unix.S_ISGID

// Dir is a directory opened without following a symlink in any component.
type Dir struct {
	fd   int
	path string
}

// OpenDir creates dir (perm) if needed and opens it, refusing a symlink in
// any component, so a planted link cannot redirect our writes. The hook
// owns the directory: group and other write bits are taken away, unless it
// is a shared sticky directory (/tmp) given on the command line.
func OpenDir(dir string, perm os.FileMode) (*Dir, error) {
	if err := os.MkdirAll(dir, perm); err != nil {
		return nil, fmt.Errorf("create directory %q: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve directory %q: %w", dir, err)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, abs, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("open directory %q: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat directory %q: %w", dir, err)
	}
	if st.Mode&unix.S_ISVTX == 0 {
		if err := tighten(fd, &st); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("fix mode of directory %q: %w", dir, err)
		}
	}
	return &Dir{fd: fd, path: dir}, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Path is the directory as given to OpenDir.
func (d *Dir) Path() string { return d.path }

// Open opens name inside d, never through a symlink and never blocking on a
// FIFO planted in its place; only a regular file with one link is
// accepted. Created files get perm; an existing one loses group and other
// write bits.
func (d *Dir) Open(name string, flags int, perm os.FileMode) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(perm))
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		unix.Close(fd)
		return nil, fmt.Errorf("%q: %w", name, ErrNotRegular)
	case st.Nlink > 1:
		unix.Close(fd)
		return nil, fmt.Errorf("%q: %w (%d links)", name, ErrLinked, st.Nlink)
	}
	if err := tighten(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fix mode of %q: %w", name, err)
	}
	// O_NONBLOCK stays: it has no effect on a regular file.
	return os.NewFile(uintptr(fd), name), nil
}

// Rename renames from to to inside d.
func (d *Dir) Rename(from, to string) error { return unix.Renameat(d.fd, from, d.fd, to) }

// Remove removes the file name inside d.
func (d *Dir) Remove(name string) error { return unix.Unlinkat(d.fd, name, 0) }

// tighten takes the loose bits away and makes the file ours when another
// user pre-created it (we are root: anyone else could rewrite it).
func tighten(fd int, st *unix.Stat_t) error {
	if st.Mode&looseBits != 0 {
		if err := unix.Fchmod(fd, st.Mode&0o7777&^looseBits); err != nil {
			return err
		}
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid && uid == 0 {
		if err := unix.Fchown(fd, int(uid), -1); err != nil {
			return err
		}
	}
	return nil
}

// Names lists up to n names in d (n <= 0: all).
func (d *Dir) Names(n int) ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open directory %q: %w", d.path, err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read directory %q: %w", d.path, err)
	}
	return names, nil
}
