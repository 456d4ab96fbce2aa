package fileio

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// noOpenat2Env holds the errno the test binary, started again, makes
// openat2 fail with (noOpenat2) before it runs TestOpenDirWithoutOpenat2.
const noOpenat2Env = "IPTA_TEST_NO_OPENAT2"

// TestOpenDirWithoutOpenat2: where openat2 fails, as before Linux 5.6
// (ENOSYS) or under systemd's RestrictSUIDSGID= (EPERM, ENOSYS in later
// versions), which the shipped agent and textfile units set, OpenDir
// still makes and opens its directory, and still refuses a symlink in
// any component. It used to fail, and no finding could be written. The
// test binary runs the checks again under a seccomp filter of its own.
func TestOpenDirWithoutOpenat2(t *testing.T) {
	if v := os.Getenv(noOpenat2Env); v != "" {
		errno, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		noOpenat2(t, unix.Errno(errno))
		openDirChecks(t)
		return
	}
	nstest.Need(t, os.Geteuid() == 0, "needs root to load a seccomp filter on every thread")
	for _, errno := range []unix.Errno{unix.ENOSYS, unix.EPERM} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenDirWithoutOpenat2$", "-test.v")
		cmd.Env = append(os.Environ(), noOpenat2Env+"="+strconv.Itoa(int(errno)), "TMPDIR="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("openat2 failing with %v: %v\n%s", errno, err, out)
		}
	}
}

// noOpenat2 makes every thread's openat2 fail with errno from now on,
// and checks that it does.
func noOpenat2(t *testing.T, errno unix.Errno) {
	t.Helper()
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_OPENAT2},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(errno)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		t.Fatalf("load seccomp filter: %v", e)
	}
	if _, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_RDONLY}); !errors.Is(err, errno) {
		t.Fatalf("openat2 under the filter: %v, want %v", err, errno)
	}
}

// openDirChecks makes a nested directory, writes in it, opens it again,
// and is refused a path through a symlink.
func openDirChecks(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	d, err := OpenDir(dir, 0o755)
	if err != nil {
		t.Fatalf("OpenDir of a new directory: %v", err)
	}
	f, err := d.Open("findings.jsonl", unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	d.Close()
	if d, err = OpenDir(dir, 0o755); err != nil {
		t.Fatalf("OpenDir of an existing directory: %v", err)
	}
	d.Close()
	if err := os.Symlink(filepath.Join(base, "a"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if d, err := OpenDir(filepath.Join(base, "link", "b"), 0o755); err == nil {
		d.Close()
		t.Error("OpenDir went through a symlink")
	}
	if _, err := os.Stat(filepath.Join(base, "a", "b", "findings.jsonl")); err != nil {
		t.Error(err)
	}
}
