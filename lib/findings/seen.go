package findings

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultStateDir holds the per-sandbox memory; under /run it is gone after
// a reboot, as are the sandboxes it describes.
const DefaultStateDir = "/run/iptables-alerter"

// maxSweep bounds the entries looked at per sweep.
const maxSweep = 4096

// Seen remembers, per sandbox, the fingerprint last recorded, so the hook
// firing for every container of a pod gives one finding per usage.
type Seen struct {
	Dir string
}

type seenEntry struct {
	Key         string `json:"key"`
	Netns       string `json:"netns"`
	Fingerprint string `json:"fingerprint"`
}

// Record calls write unless the sandbox's last recorded fingerprint is the
// same, and remembers the fingerprint when write succeeds. The entry stays
// locked throughout, so two containers of one pod starting together give one
// finding. It reports whether write was called.
func (s Seen) Record(ctx context.Context, key, netns, fingerprint string, write func() error) (bool, error) {
	dirfd, err := openDir(filepath.Join(s.Dir, "sandboxes"))
	if err != nil {
		return false, err
	}
	defer unix.Close(dirfd)
	sum := sha256.Sum256([]byte(key))
	name := hex.EncodeToString(sum[:16]) + ".json"
	f, err := openFile(dirfd, name, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return false, fmt.Errorf("open sandbox state %q: %w", name, err)
	}
	defer f.Close()
	if err := lock(ctx, f); err != nil {
		return false, err
	}
	var old seenEntry
	if data, err := io.ReadAll(io.LimitReader(f, 64<<10)); err == nil && len(data) > 0 {
		// A damaged entry is forgotten: at worst one finding is repeated.
		_ = json.Unmarshal(data, &old)
	}
	if old.Fingerprint == fingerprint {
		return false, nil
	}
	if err := write(); err != nil {
		return true, err
	}
	data, _ := json.Marshal(seenEntry{Key: key, Netns: netns, Fingerprint: fingerprint})
	if err := f.Truncate(0); err != nil {
		return true, fmt.Errorf("save sandbox state %q: %w", name, err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return true, fmt.Errorf("save sandbox state %q: %w", name, err)
	}
	return true, nil
}

// Sweep removes entries whose network namespace is gone: the sandbox has
// stopped and its id will not come back.
func (s Seen) Sweep() error {
	dir := filepath.Join(s.Dir, "sandboxes")
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open state directory %q: %w", dir, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(maxSweep)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read state directory %q: %w", dir, err)
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		data, err := readSmall(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		var e seenEntry
		if json.Unmarshal(data, &e) != nil || e.Netns == "" {
			continue
		}
		if _, err := os.Stat(e.Netns); errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	return nil
}

func readSmall(p string) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 64<<10))
}
