package nstest

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// HostProc is a stand-in for the host's /proc as the agent's --host-proc
// reads it: only pid 1's network namespace, a link to nsPath. A test's
// "node" is a namespace it made (or the one the agent runs in:
// /proc/self/ns/net), never the host's pid 1, whose namespace a sandboxed
// test may not open.
func HostProc(t testing.TB, nsPath string) string {
	t.Helper()
	proc := filepath.Join(t.TempDir(), "proc")
	if err := os.MkdirAll(filepath.Join(proc, "1", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(nsPath, filepath.Join(proc, "1", "ns", "net")); err != nil {
		t.Fatal(err)
	}
	return proc
}

// ShowProc makes pid's /proc entry appear in a HostProc stand-in, as a
// link to the real one: a sandboxed test cannot give the agent the real
// /proc (pid 1's namespace is not its to open), so it shows the agent the
// processes it means it to describe, before they write.
func ShowProc(t testing.TB, hostProc string, pid int) {
	t.Helper()
	link := filepath.Join(hostProc, strconv.Itoa(pid))
	if err := os.Symlink(filepath.Join("/proc", strconv.Itoa(pid)), link); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
}

// Pids lists the processes named comm (as /proc/PID/comm has it) whose
// network namespace is the one at nsPath.
func Pids(t testing.TB, nsPath, comm string) []int {
	t.Helper()
	var want unix.Stat_t
	if err := unix.Stat(nsPath, &want); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// FDs counts the process's open fds, for tests proving a leak-free cycle.
func FDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Restorer starts iptables-nft-restore --noflush in ns, which commits each
// table section written to it and stays alive meanwhile, until the test
// ends: a writer an agent's watch can describe. It and its parent (this
// test) are shown in hostProc before anything is written. ip netns exec
// execs it, so pid is the one started.
func (ns *NS) Restorer(hostProc string) (w io.Writer, pid int) {
	t := ns.t
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "iptables-nft-restore", "--noflush")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("iptables-nft-restore: %v", err)
		}
	})
	ShowProc(t, hostProc, cmd.Process.Pid)
	ShowProc(t, hostProc, os.Getpid())
	return in, cmd.Process.Pid
}

// ShowNextPids makes the next n pids the kernel will give (in this pid
// namespace, from /proc/sys/kernel/ns_last_pid on, wrapping at pid_max)
// appear in a HostProc stand-in, as links to their /proc entries, dangling
// until the process exists: a writer that exits at once after its commit
// cannot be shown once it runs. Other processes take pids meanwhile: n
// leaves room for them. Without testing.TB: the bench uses it too.
func ShowNextPids(hostProc string, n int) error {
	last, err := readInt("/proc/sys/kernel/ns_last_pid")
	if err != nil {
		return err
	}
	max, err := readInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return err
	}
	for i := 1; i <= min(n, max-2); i++ {
		// Pids wrap to 300 (RESERVED_PIDS), not 1; a few links too many.
		pid := (last+i-2)%(max-2) + 2
		link := filepath.Join(hostProc, strconv.Itoa(pid))
		if err := os.Symlink(filepath.Join("/proc", strconv.Itoa(pid)), link); err != nil && !os.IsExist(err) {
			return err
		}
	}
	return nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
