package findings

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// DefaultPath is where the hook writes and the consumers read.
const DefaultPath = "/var/log/iptables-alerter/findings.jsonl"

// DefaultMaxBytes is the size at which the file is rotated to "<path>.1".
const DefaultMaxBytes = 10 << 20

// DefaultGenerations is how many rotated files are kept: PATH.1 (newest)
// to PATH.N (oldest). A consumer that is down finishes them in order, so
// it loses nothing while fewer than N*MaxBytes bytes arrive meanwhile.
const DefaultGenerations = 4

// ErrNotRotated marks an append that was written but could not rotate the
// file first (a directory planted at PATH.1, say): the finding is on disk,
// the file grows past MaxBytes, and the error should be logged.
var ErrNotRotated = errors.New("findings file not rotated")

// Log is the findings file.
type Log struct {
	Path     string
	MaxBytes int64
	// Generations is the number of rotated files kept (0: one, PATH.1).
	Generations int
}

// Append writes rec as one line. Concurrent hooks serialise on a lock file
// beside the log (not the log itself, which rotation renames away). A write
// that fails part-way is cut back so readers never see half a line, and a
// line left torn by a writer that was killed is ended before ours, so ours
// is never glued onto it. The error wraps ErrNotRotated when only the
// rotation failed: the line was written.
func (l Log) Append(ctx context.Context, rec Record) error {
	line, err := Encode(rec)
	if err != nil {
		return err
	}
	dir, base := filepath.Split(l.Path)
	if dir == "" {
		dir = "."
	}
	d, err := fileio.OpenDir(dir, 0o750)
	if err != nil {
		return err
	}
	defer d.Close()

	lk, err := d.Open(base+".lock", unix.O_RDWR|unix.O_CREAT, 0o640)
	if err != nil {
		return fmt.Errorf("open lock file for %q: %w", l.Path, err)
	}
	defer lk.Close()
	if err := lock(ctx, lk); err != nil {
		return err
	}

	f, err := d.Open(base, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT, 0o640)
	if err != nil {
		return fmt.Errorf("open findings file %q: %w", l.Path, err)
	}
	defer func() { f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat findings file %q: %w", l.Path, err)
	}
	size := fi.Size()
	var rotErr error
	if l.MaxBytes > 0 && size > 0 && size+int64(len(line)) > l.MaxBytes {
		if rotErr = l.rotate(d, base); rotErr == nil {
			f.Close()
			if f, err = d.Open(base, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT, 0o640); err != nil {
				return fmt.Errorf("open findings file %q: %w", l.Path, err)
			}
			size = 0
		}
	}
	if size > 0 {
		// Under the lock the last byte is final: anything but a newline is
		// the torn line of a writer killed mid-append. End it, so it stays
		// one malformed line and ours stays whole.
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, size-1); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read findings file %q: %w", l.Path, err)
		}
		if last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	// One write call: with O_APPEND the line lands whole at the end.
	n, err := f.Write(line)
	if err != nil || n != len(line) {
		if n > 0 {
			_ = f.Truncate(size)
		}
		if err == nil {
			err = fmt.Errorf("short write (%d of %d bytes)", n, len(line))
		}
		return fmt.Errorf("append to findings file %q: %w", l.Path, err)
	}
	if rotErr != nil {
		return fmt.Errorf("%w %q (appended anyway): %w", ErrNotRotated, l.Path, rotErr)
	}
	return nil
}

// rotate shifts PATH.k to PATH.k+1, oldest first, dropping the oldest, then
// PATH to PATH.1. The first failure stops it before anything is replaced,
// so a broken generation costs no older file: the caller appends anyway.
func (l Log) rotate(d *fileio.Dir, base string) error {
	n := max(l.Generations, 1)
	gen := func(k int) string { return GenerationName(base, k) }
	for k := n - 1; k >= 1; k-- {
		err := d.Rename(gen(k), gen(k+1))
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rename %q to %q: %w", gen(k), gen(k+1), err)
		}
	}
	if err := d.Rename(base, gen(1)); err != nil {
		return fmt.Errorf("rename %q to %q: %w", base, gen(1), err)
	}
	return nil
}
