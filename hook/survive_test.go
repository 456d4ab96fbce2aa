package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/ocistate"
)

// panicReader stands for any bug in the hook path: it panics where the
// hook reads the state.
type panicReader struct{}

func (panicReader) Read([]byte) (int, error) { panic("boom in the hook path") }

// TestHookPanicExitsZero: a panic anywhere in the hook path ends in one log
// line and exit status 0; a poststart hook exiting 2 kills the container.
func TestHookPanicExitsZero(t *testing.T) {
	nstest.NeedRoot(t) // the hook reads the state only as root
	var stderr strings.Builder
	code := dispatch(commands(), []string{"hook", "--findings", filepath.Join(t.TempDir(), "f.jsonl"), "--state-dir", t.TempDir()}, panicReader{}, io.Discard, &stderr)
	out := stderr.String()
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "internal error") || !strings.Contains(out, "boom in the hook path") {
		t.Fatalf("panic: exit %d, stderr %q; want exit 0 and one line saying what happened", code, out)
	}
}

// hookCmd is the built hook on a pod netns holding one rule, so that it
// records a finding and logs a line.
func hookCmd(t *testing.T, ctx context.Context, h *hookRun, extra ...string) *exec.Cmd {
	t.Helper()
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	h.findings = filepath.Join(t.TempDir(), "findings.jsonl")
	h.stateDir = t.TempDir()
	args := append([]string{"hook", "--findings", h.findings, "--state-dir", h.stateDir}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(pod{netns: ns.Path(), sandbox: "sb-" + ns.Name}.state(t))
	return cmd
}

// TestHookStderrClosed: when nothing reads the hook's stderr, writing a log
// line must not kill it with SIGPIPE, and the finding is still recorded.
func TestHookStderrClosed(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var h hookRun
	cmd := hookCmd(t, ctx, &h, "--log-level", "debug")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd.Stderr, cmd.Stdout = w, w
	err = cmd.Run()
	w.Close()
	if err != nil {
		t.Fatalf("hook with a closed stderr: %v (%v), want exit 0", err, cmd.ProcessState)
	}
	if recs := findingstest.Read(t, h.findings); len(recs) != 1 {
		t.Fatalf("hook with a closed stderr: %d findings, want 1", len(recs))
	}
}

// TestHookBadFlagStderrClosed: a bad flag's line to a stderr nobody reads
// must not kill the hook with SIGPIPE either: exit 0.
func TestHookBadFlagStderrClosed(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	cmd := exec.Command(bin, "hook", "--no-such-flag")
	cmd.Stderr, cmd.Stdout = w, w
	err = cmd.Run()
	w.Close()
	if err != nil {
		t.Fatalf("hook with a bad flag and a closed stderr: %v, want exit 0", err)
	}
}

// TestHookLogFileFIFO: a --log-file that is a FIFO, with no reader or with
// one that never reads, must neither hang the hook nor stop the finding.
func TestHookLogFileFIFO(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	for _, reader := range []bool{false, true} {
		name := map[bool]string{false: "no reader", true: "a reader that never reads"}[reader]
		t.Run(name, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "hook.log")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			if reader {
				f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var h hookRun
			// hookCmd's setup (a netns with rules) may itself take
			// seconds on a busy machine: the hook's own time starts at Run.
			cmd := hookCmd(t, ctx, &h, "--log-file", fifo, "--log-level", "debug", "--timeout", "1s")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			var hung atomic.Bool
			limit := time.AfterFunc(10*time.Second, func() { hung.Store(true); cancel() })
			start := time.Now()
			err := cmd.Run()
			limit.Stop()
			if hung.Load() {
				t.Fatalf("hook with a FIFO --log-file still running after %v", time.Since(start))
			}
			if err != nil {
				t.Fatalf("hook with a FIFO --log-file: %v, want exit 0\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "cannot open log file") {
				t.Errorf("stderr does not say the log file was refused:\n%s", stderr.String())
			}
			if recs := findingstest.Read(t, h.findings); len(recs) != 1 {
				t.Fatalf("%d findings, want 1\n%s", len(recs), stderr.String())
			}
		})
	}
}

// TestGiveUpLogStuck: the watchdog exits even when its log line cannot be
// written (the logger's writer blocked, as a --log-file on a frozen
// filesystem blocks, the stuck goroutine holding the logger's lock), and
// while a finding is being written it waits for it up to a second.
func TestGiveUpLogStuck(t *testing.T) {
	r, w := io.Pipe() // never read: every write blocks
	defer r.Close()
	log := logrus.New()
	log.SetOutput(w)
	go log.Error("the stuck line, holding the logger's lock")
	time.Sleep(50 * time.Millisecond)
	var writing sync.Mutex
	writing.Lock()
	exited := make(chan int, 1)
	state, written := runtimeState(t)
	start := time.Now()
	go giveUp(log, time.Second, &writing, state, func(code int) { exited <- code })
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("gave up after %v, while a finding was being written: want a second's wait", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not exit with its log line blocked")
	}
	// What the stuck hook had not read of the state, it read first.
	if err := written(); err != nil {
		t.Fatalf("the runtime's write of the state: %v", err)
	}
}

// runtimeState is the runtime's end of a state pipe: it writes 256 KiB,
// more than the pipe holds, then closes. written gives the write's error
// once the test has closed its own read end (as a hook process's exit
// closes its stdin): EPIPE where the reader left before the write was
// done, which crun 1.8 dies of, failing the container. The drains' bounds
// are raised meanwhile: a loaded machine may starve the writer.
func runtimeState(t *testing.T) (r *os.File, written func() error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	within, giveUp := ocistate.DrainWithin, giveUpDrain
	ocistate.DrainWithin, giveUpDrain = time.Minute, time.Minute
	t.Cleanup(func() { ocistate.DrainWithin, giveUpDrain = within, giveUp })
	done := make(chan error, 1)
	go func() {
		_, err := w.Write([]byte(strings.Repeat("x", 256<<10)))
		w.Close()
		done <- err
	}()
	t.Cleanup(func() { r.Close() })
	return r, func() error {
		t.Helper()
		r.Close()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatal("the runtime's write of the state is still blocked")
			return nil
		}
	}
}

// TestBadFlagReadsState: a flag the binary does not know (a hooks.d JSON of
// another version) still reads the runtime's state to its end before the
// exit.
func TestBadFlagReadsState(t *testing.T) {
	r, written := runtimeState(t)
	if code := dispatch(commands(), []string{"hook", "--no-such-flag"}, r, io.Discard, io.Discard); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	if err := written(); err != nil {
		t.Fatalf("the runtime's write of the state: %v", err)
	}
}

// TestNotRootReadsState: the hook run by a user other than root (a
// runtime's misconfiguration) exits at once, after reading the state. The
// built binary as nobody: in-process the test is root. Its drain's bound
// is the shipped second.
func TestNotRootReadsState(t *testing.T) {
	nstest.NeedRoot(t)
	r, written := runtimeState(t)
	cmd := exec.Command(bin, "hook", "--findings", filepath.Join(t.TempDir(), "f.jsonl"))
	cmd.Stdin = r
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Only the hook's end stays: its exit closes the pipe's last reader.
	r.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("the hook as nobody: %v (must exit 0)\n%s", err, &stderr)
	}
	if !strings.Contains(stderr.String(), "must run as root") {
		t.Errorf("no line saying the hook needs root:\n%s", &stderr)
	}
	if err := written(); err != nil {
		t.Fatalf("the runtime's write of the state: %v", err)
	}
}
