package fileio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLinked is returned for a file with more than one hard link: a link
// planted in our directory to a file elsewhere (/etc/shadow) must not be
// written through.
var ErrLinked = errors.New("file has other hard links")

// What the hook writes must not be writable by anyone else: a directory or
// file pre-created world-writable (or by another user) would let anyone
// forge or delete findings. Group write on a root-owned directory is left:
// it is an admin's choice (Debian's /var/log is root:adm 0775).
const (
	worldWrite = 0o002
	groupWrite = 0o020
	setID      = unix.S_ISUID | unix.S_ISGID
)

// Dir is a directory opened without following a symlink in any component.
type Dir struct {
	fd   int
	path string
}

// OpenDir creates dir (perm) if needed and opens it, refusing a symlink in
// any component, so a planted link cannot redirect our writes. The hook
// owns the directory (see tighten), unless it is a shared sticky directory
// (/tmp) given on the command line.
func OpenDir(dir string, perm os.FileMode) (*Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve directory %q: %w", dir, err)
	}
	fd, err := openNoSymlinks(abs)
	if errors.Is(err, unix.ENOENT) {
		// Made only when missing: the common case is one system call.
		if err := mkdirAll(abs, perm); err != nil {
			return nil, fmt.Errorf("create directory %q: %w", dir, err)
		}
		fd, err = openNoSymlinks(abs)
	}
	if err != nil {
		return nil, fmt.Errorf("open directory %q: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat directory %q: %w", dir, err)
	}
	if st.Mode&unix.S_ISVTX == 0 {
		if err := tighten(fd, &st, worldWrite); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("fix mode of directory %q: %w", dir, err)
		}
	}
	return &Dir{fd: fd, path: dir}, nil
}

// openNoSymlinks opens the directory abs (absolute and clean) without
// following a symlink in any component: in one openat2 call
// (RESOLVE_NO_SYMLINKS) where the kernel has it, else component by
// component (walkOpen). openat2 is missing before Linux 5.6, and refused by
// seccomp filters that cannot read its flags, which it passes in a
// structure: systemd's RestrictSUIDSGID= refuses every call of it (EPERM,
// ENOSYS in later versions), and the shipped agent and textfile units set
// it. Without the walk, those could write no finding.
func openNoSymlinks(abs string) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS}
	fd, err := unix.Openat2(unix.AT_FDCWD, abs, how)
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
		return fd, err
	}
	fd, werr := walkOpen(abs, 0, false)
	if werr != nil {
		return -1, werr
	}
	return fd, nil
}

// mkdirAll is os.MkdirAll that never goes through a symlink: each
// component is made and opened inside the one before it (O_NOFOLLOW,
// walkOpen), so a link planted at a component is refused before anything
// is made where it points (os.MkdirAll created the directories there, and
// only the open after it refused the path).
func mkdirAll(abs string, perm os.FileMode) error {
	fd, err := walkOpen(abs, perm, true)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// walkOpen opens abs (absolute and clean) one component at a time inside
// the one before it, never through a symlink (O_NOFOLLOW), making each
// first when mkdir, and gives the last component's descriptor, opened for
// reading. The ones before it are opened O_PATH, which needs only search
// permission on them, as openat2's walk does.
func walkOpen(abs string, perm os.FileMode, mkdir bool) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	names := strings.FieldsFunc(abs, func(r rune) bool { return r == '/' })
	if len(names) == 0 {
		unix.Close(fd)
		return unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	for i, name := range names {
		if mkdir {
			if err := unix.Mkdirat(fd, name, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, err
			}
		}
		how := unix.O_PATH
		if i == len(names)-1 {
			how = unix.O_RDONLY
		}
		next, err := unix.Openat(fd, name, how|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", name, err)
		}
		fd = next
	}
	return fd, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Path is the directory as given to OpenDir.
func (d *Dir) Path() string { return d.path }

// Open opens name inside d, never through a symlink and never blocking on a
// FIFO planted in its place; only a regular file with one link is
// accepted. Created files get perm; an existing one is made the hook's
// (see tighten) and loses set-id bits.
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
	if err := tighten(fd, &st, worldWrite|setID); err != nil {
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

// tighten makes what the hook writes its own. Run as root, a directory or
// file another user made is given to root and loses group and other write;
// a root-owned one loses the bits in drop (world write, and set-id bits
// for a file).
func tighten(fd int, st *unix.Stat_t, drop uint32) error {
	uid := uint32(os.Geteuid())
	if st.Uid != uid && uid == 0 {
		if err := unix.Fchown(fd, 0, -1); err != nil {
			return err
		}
		drop |= groupWrite | worldWrite
	}
	if st.Mode&drop != 0 {
		return unix.Fchmod(fd, st.Mode&0o7777&^drop)
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
