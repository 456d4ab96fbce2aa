package follow

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLockDir: one consumer holds a checkpoint directory at a time; the
// second waits, is told, gives up when its context ends and takes the
// lock once the first let go; a link planted as the lock file is refused.
func TestLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cp")
	first, err := LockDir(context.Background(), dir, 0o700, nil)
	if err != nil {
		t.Fatal(err)
	}
	busy := 0
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := LockDir(ctx, dir, 0o700, func() { busy++ }); !errors.Is(err, context.DeadlineExceeded) || busy != 1 {
		t.Fatalf("second lock while held: %v, busy told %d times; want the deadline, told once", err, busy)
	}
	done := make(chan error, 1)
	go func() {
		f, err := LockDir(context.Background(), dir, 0o700, nil)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	first.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the lock was not taken once free")
	}

	other := filepath.Join(t.TempDir(), "cp")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), filepath.Join(other, lockName)); err != nil {
		t.Fatal(err)
	}
	if f, err := LockDir(context.Background(), other, 0o700, nil); err == nil {
		f.Close()
		t.Fatal("a link as the lock file was followed")
	}
}
