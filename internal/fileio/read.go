package fileio

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrTooLarge is returned for a file over the caller's bound.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular is returned for a FIFO, device, directory or socket where
// a regular file was expected.
var ErrNotRegular = errors.New("not a regular file")

// ReadFile reads the regular file at path, at most max bytes. A missing
// file gives an error for which errors.Is(err, os.ErrNotExist) holds.
func ReadFile(path string, max int64) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO planted at the path must not hang.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %q: %w", path, ErrNotRegular)
	}
	data, err := ReadLimited(f, max)
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	return data, nil
}

// ReadLimited reads r to its end, or fails with ErrTooLarge past max bytes.
func ReadLimited(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, max)
	}
	return data, nil
}
