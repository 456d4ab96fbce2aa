package follow

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// Checkpoint says which file the follower is in and how far it got.
type Checkpoint struct {
	Dev   uint64 `json:"dev"`
	Inode uint64 `json:"inode"`
	// Birth is the file's birth time (statx), in nanoseconds since the
	// epoch; 0 where the filesystem gives none, or in a checkpoint saved
	// before it was kept. With it a file is known at offset 0 too, where
	// there is no first line yet: an inode number is given again to the
	// next file made once the file is removed, and the device number can
	// change across a reboot.
	Birth int64 `json:"birth_ns,omitempty"`
	// FirstLine is the hex SHA-256 of the file's first line (see
	// firstLineHash); it tells a reused inode number or a truncated and
	// refilled file from the one the offset belongs to. Empty while Offset
	// is 0: the file is then known by the one before it (Rotated).
	FirstLine string `json:"first_line_sha256"`
	// Offset is just past the last handled newline.
	Offset int64 `json:"offset"`
	// Rotated is the file that comes before this one (the newest rotated
	// file, while reading the current one), as it was when the follower
	// moved here. When the file the checkpoint names is gone (truncated in
	// place, or its inode reused), the follower goes on with the file after
	// this one: everything there is newer than what was handled.
	Rotated FileID `json:"rotated"`
}

// FileID identifies a file beyond its inode number.
type FileID struct {
	Dev       uint64 `json:"dev"`
	Inode     uint64 `json:"inode"`
	Birth     int64  `json:"birth_ns,omitempty"`
	FirstLine string `json:"first_line_sha256"`
}

// same reports whether a and b name one file: the same inode, born at the
// same time where both know it (then the device may differ: a reboot
// can renumber it), else on the same device; and the same first line.
func (a FileID) same(b FileID) bool {
	return sameFile(a.Dev, a.Inode, a.Birth, b.Dev, b.Inode, b.Birth) && a.FirstLine == b.FirstLine
}

// sameFile is the identity of same without the first line.
func sameFile(dev1, ino1 uint64, birth1 int64, dev2, ino2 uint64, birth2 int64) bool {
	if ino1 != ino2 {
		return false
	}
	if birth1 != 0 && birth2 != 0 {
		return birth1 == birth2
	}
	return dev1 == dev2
}

// IsZero reports whether nothing has been read yet.
func (c Checkpoint) IsZero() bool { return c == Checkpoint{} }

// Store keeps the follower's checkpoint. Save must replace the checkpoint
// atomically: after a crash Load gives either the old or the new one.
type Store interface {
	// Load gives the saved checkpoint, the zero one when none was saved.
	// An error wrapping ErrDamaged means the saved one cannot be read back.
	Load() (Checkpoint, error)
	Save(Checkpoint) error
}

// ErrDamaged marks a saved checkpoint that cannot be read back (torn or
// garbage). The follower then starts over from the oldest line: a replay
// loses nothing, and both consumers handle a line twice harmlessly.
var ErrDamaged = errors.New("saved checkpoint is damaged")

// maxCheckpoint bounds a checkpoint file read back.
const maxCheckpoint = 64 << 10

// NoStore keeps no checkpoint: a follower with it reads from the oldest
// line each time, for a one-off pass over what the file holds (a consumer
// that lost its own state reading the findings again).
type NoStore struct{}

// Load gives the zero checkpoint.
func (NoStore) Load() (Checkpoint, error) { return Checkpoint{}, nil }

// Save keeps nothing.
func (NoStore) Save(Checkpoint) error { return nil }

// FileStore is a Store in one JSON file.
type FileStore string

// Load reads the checkpoint; a missing file is the zero checkpoint.
func (p FileStore) Load() (Checkpoint, error) {
	path := string(p)
	data, err := fileio.ReadFile(path, maxCheckpoint)
	if errors.Is(err, os.ErrNotExist) {
		return Checkpoint{}, nil
	}
	if errors.Is(err, fileio.ErrTooLarge) {
		return Checkpoint{}, fmt.Errorf("load checkpoint: %w: %w", ErrDamaged, err)
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("load checkpoint: %w", err)
	}
	var c Checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Checkpoint{}, fmt.Errorf("load checkpoint %q: %w: %w", path, ErrDamaged, err)
	}
	if c.Offset < 0 {
		return Checkpoint{}, fmt.Errorf("load checkpoint %q: %w: negative offset %d", path, ErrDamaged, c.Offset)
	}
	return c, nil
}

// Save writes the checkpoint atomically.
func (p FileStore) Save(c Checkpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("save checkpoint %q: %w", string(p), err)
	}
	if err := fileio.WriteFile(string(p), append(b, '\n'), 0o640); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// hashPrefix bounds how much of an oversized first line is hashed: the
// identity check runs on every poll and must stay cheap.
const hashPrefix = 64 << 10

// firstLineHash hashes the first line including its newline, or the first
// hashPrefix bytes of a longer one. ok is false while the first line is
// still incomplete, because its hash would still change.
func firstLineHash(r io.ReaderAt) (sum string, ok bool, err error) {
	buf := make([]byte, hashPrefix)
	n, err := r.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", false, err
	}
	buf = buf[:n]
	if i := bytes.IndexByte(buf, '\n'); i >= 0 {
		buf = buf[:i+1]
	} else if n < hashPrefix {
		return "", false, nil
	}
	h := sha256.Sum256(buf)
	return hex.EncodeToString(h[:]), true, nil
}
