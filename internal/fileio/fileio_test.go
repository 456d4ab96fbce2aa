package fileio

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		max  int64
		want string
		is   error
	}{
		{name: "regular", path: regular, max: 5, want: "12345"},
		{name: "over the bound", path: regular, max: 4, is: ErrTooLarge},
		{name: "missing", path: filepath.Join(dir, "missing"), max: 5, is: os.ErrNotExist},
		{name: "fifo, no writer", path: fifo, max: 5, is: ErrNotRegular},
		{name: "directory", path: dir, max: 5, is: ErrNotRegular},
		{name: "symlink", path: link, max: 5, is: unix.ELOOP},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var got []byte
			var err error
			go func() { got, err = ReadFile(tc.path, tc.max); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("ReadFile hangs")
			}
			if tc.is != nil {
				if !errors.Is(err, tc.is) {
					t.Errorf("error %v, want %v", err, tc.is)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("ReadFile = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestWriteFileReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "state.json")
	if err := os.Symlink(victim, p); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o640); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("symlink target written: %q", b)
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
		t.Errorf("%s after WriteFile: %v %v", p, fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(left) != 0 {
		t.Errorf("temp files left behind: %v", left)
	}
}

func TestOpenDir(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(filepath.Join(dir, "link", "sub", "deeper"), 0o750); err == nil {
		t.Error("OpenDir went through a symlink")
	}
	// Refused before anything is made where the link points.
	if _, err := os.Lstat(filepath.Join(real, "sub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenDir made a directory through the symlink: %v", err)
	}
	// The missing components of a path without links are made.
	nested := filepath.Join(dir, "a", "b", "c")
	d, err := OpenDir(nested, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi, err := os.Lstat(nested); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Errorf("made %s: %v, %v; want a directory of mode 0750", nested, fi, err)
	}
	// A sticky shared directory (/tmp) keeps its mode.
	sticky := filepath.Join(dir, "sticky")
	if err := os.Mkdir(sticky, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	d, err = OpenDir(sticky, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if fi, _ := os.Stat(sticky); fi.Mode().Perm() != 0o777 {
		t.Errorf("sticky directory changed to %v", fi.Mode())
	}
	// Our own group-writable directory (Debian's /var/log is root:adm
	// 0775) keeps group write; world write goes.
	for mode, want := range map[os.FileMode]os.FileMode{0o775: 0o775, 0o777: 0o775} {
		p := filepath.Join(dir, mode.String())
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		d, err := OpenDir(p, 0o750)
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		if fi, _ := os.Stat(p); fi.Mode().Perm() != want {
			t.Errorf("own directory of mode %v is now %v, want %v", mode, fi.Mode().Perm(), want)
		}
	}
}

// TestWriteFileRemovesStaleTemps: the temp files of a path's writes killed
// midway, over a minute old, go at the process's first write of the path;
// a fresh one (another process's write under way) and other files stay.
func TestWriteFileRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cp.json")
	old := time.Now().Add(-2 * time.Minute)
	files := map[string]bool{ // name: still there after the write
		".cp.json.tmp-0123456789ab":    false,
		".cp.json.tmp-ba9876543210":    true, // fresh
		".cp.json.tmp-notahexname!":    true,
		".cp.json.tmp-0123":            true,
		".other.json.tmp-0123456789ab": true,
		"cp.json.1":                    true,
	}
	for name := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if name != ".cp.json.tmp-ba9876543210" {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := WriteFile(path, []byte("{}\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	for name, kept := range files {
		_, err := os.Lstat(filepath.Join(dir, name))
		if there := err == nil; there != kept {
			t.Errorf("%s there %v after the write, want %v", name, there, kept)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "{}\n" {
		t.Errorf("written %q, %v", b, err)
	}
}
