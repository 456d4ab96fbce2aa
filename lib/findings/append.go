package findings

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultPath is where the hook writes and the consumers read.
const DefaultPath = "/var/log/iptables-alerter/findings.jsonl"

// DefaultMaxBytes is the size at which the file is rotated to "<path>.1".
const DefaultMaxBytes = 10 << 20

// Log is the findings file.
type Log struct {
	Path     string
	MaxBytes int64
}

// Append writes rec as one line. Concurrent hooks serialise on a lock file
// beside the log (not the log itself, which rotation renames away). A write
// that fails part-way is cut back so readers never see half a line.
func (l Log) Append(ctx context.Context, rec Record) error {
	line, err := Encode(rec)
	if err != nil {
		return err
	}
	dir, base := filepath.Split(l.Path)
	if dir == "" {
		dir = "."
	}
	dirfd, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)

	lk, err := openFile(dirfd, base+".lock", unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return fmt.Errorf("open lock file for %q: %w", l.Path, err)
	}
	defer lk.Close()
	if err := lock(ctx, lk); err != nil {
		return err
	}

	f, err := openFile(dirfd, base, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT)
	if err != nil {
		return fmt.Errorf("open findings file %q: %w", l.Path, err)
	}
	defer func() { f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat findings file %q: %w", l.Path, err)
	}
	size := fi.Size()
	if l.MaxBytes > 0 && size > 0 && size+int64(len(line)) > l.MaxBytes {
		if err := unix.Renameat(dirfd, base, dirfd, base+".1"); err != nil {
			return fmt.Errorf("rotate findings file %q: %w", l.Path, err)
		}
		f.Close()
		if f, err = openFile(dirfd, base, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT); err != nil {
			return fmt.Errorf("open findings file %q: %w", l.Path, err)
		}
		size = 0
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
	return nil
}

// Encode renders a record as one JSON line. encoding/json escapes control
// characters and replaces invalid UTF-8, so attacker-chosen strings can
// neither break the line nor forge another.
func Encode(rec Record) ([]byte, error) {
	rec.Schema = Schema
	// Lists are always present as arrays, never null.
	for _, p := range []*[]string{&rec.Nft.Tables, &rec.Legacy.Tables, &rec.AllowlistEntries} {
		if *p == nil {
			*p = []string{}
		}
	}
	if rec.Examples == nil {
		rec.Examples = []Example{}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode finding: %w", err)
	}
	return append(b, '\n'), nil
}
