package netns

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestOpen(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain")
	os.WriteFile(plain, []byte("x"), 0o644)
	tests := []struct {
		name string
		path string
		err  error
	}{
		{"own netns", "/proc/self/ns/net", nil},
		{"missing", filepath.Join(t.TempDir(), "gone"), ErrNotExist},
		{"gone process", "/proc/999999999/ns/net", ErrNotExist},
		{"regular file", plain, ErrNotNetns},
		{"another namespace type", "/proc/self/ns/mnt", ErrNotNetns},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Open(tc.path)
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				defer h.Close()
				if id, err := h.ID(); err != nil || id == "" {
					t.Errorf("ID() = %q, %v", id, err)
				}
				return
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("Open(%q) = %v, want %v", tc.path, err, tc.err)
			}
		})
	}
}

func TestDoRunsInsideAndReturns(t *testing.T) {
	h, err := Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	want := errors.New("from inside")
	if err := h.Do(func() error { return want }); !errors.Is(err, want) {
		t.Fatalf("Do returned %v, want the callback's error", err)
	}
}

// TestDoPanicIsError: a panic in the callback (a decoder meeting hostile
// netlink data) comes back as an error instead of ending the process from
// Do's own goroutine.
func TestDoPanicIsError(t *testing.T) {
	h, err := Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	err = h.Do(func() error { panic("index out of range") })
	if !errors.Is(err, ErrPanic) {
		t.Fatalf("Do returned %v, want ErrPanic", err)
	}
	if err := h.Do(func() error { return nil }); err != nil {
		t.Fatalf("Do after a panic: %v", err)
	}
}
