package logsetup

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestNew: a bad level is a warning and info, json gives JSON lines.
func TestNew(t *testing.T) {
	var buf bytes.Buffer
	log := New("loud", "json", &buf)
	log.Debug("hidden")
	log.Info("shown")
	out := buf.String()
	if !strings.Contains(out, "unknown log level, using info") || !strings.Contains(out, `"msg":"shown"`) || strings.Contains(out, "hidden") {
		t.Errorf("log: %s", out)
	}
}

// TestAddFile: a regular file gets every line stderr gets; a FIFO or a
// symlink is refused with a warning, without blocking, and stderr keeps
// logging.
func TestAddFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "log")
	var buf bytes.Buffer
	log := New("info", "text", &buf)
	AddFile(log, file, &buf)
	log.Info("to both")
	if b, err := os.ReadFile(file); err != nil || !strings.Contains(string(b), "to both") || !strings.Contains(buf.String(), "to both") {
		t.Errorf("file %q (%v), stderr %q", b, err, buf.String())
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		buf.Reset()
		log := New("info", "text", &buf)
		AddFile(log, p, &buf)
		log.Info("stderr only")
		if out := buf.String(); !strings.Contains(out, "cannot open log file") || !strings.Contains(out, "stderr only") {
			t.Errorf("%s: stderr %q", p, out)
		}
	}
}
