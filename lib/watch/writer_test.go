package watch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

const ctrID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestPlaceCgroup(t *testing.T) {
	tests := []struct {
		name, file, id, unit string
	}{
		{name: "containerd systemd", file: "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234.slice/cri-containerd-" + ctrID + ".scope\n", id: ctrID},
		{name: "containerd cgroupfs", file: "0::/kubepods/besteffort/pod1234/" + ctrID + "\n", id: ctrID},
		{name: "crio", file: "0::/kubepods.slice/kubepods-pod1.slice/crio-" + ctrID + ".scope\n", id: ctrID},
		{name: "crio cgroupfs", file: "0::/crio/crio-" + ctrID + "\n", id: ctrID},
		{name: "crio cgroupfs, cgroup v1", file: "9:name=systemd:/crio/crio-" + ctrID + "\n1:cpu:/crio/crio-" + ctrID + "\n0::/crio/crio-" + ctrID + "\n", id: ctrID},
		{name: "conmon cgroupfs is not the container", file: "0::/crio/crio-conmon-" + ctrID + "\n"},
		{name: "nested cgroup named after another container", file: "0::/kubepods/besteffort/pod1/cri-containerd-" + ctrID + ".scope/cri-containerd-" + strings.Repeat("f", 64) + ".scope\n", id: ctrID},
		{name: "kind node on cgroup v1, above the kubelet's tree", file: "0::/docker/" + strings.Repeat("e", 64) + "/kubepods/besteffort/pod1/" + ctrID + "\n", id: ctrID},
		{name: "kind node, systemd driver under --cgroup-root", file: "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod1.slice/cri-containerd-" + ctrID + ".scope\n", id: ctrID},
		{name: "nested kubepods below a container", file: "0::/kubepods/pod1/cri-containerd-" + ctrID + ".scope/kubepods/cri-containerd-" + strings.Repeat("f", 64) + ".scope\n", id: ctrID},
		{name: "docker container outside kubernetes", file: "0::/docker/" + ctrID + "\n", id: ctrID},
		{name: "crio nested cgroup", file: "0::/kubepods.slice/kubepods-pod1.slice/crio-" + ctrID + ".scope/init.scope\n", id: ctrID},
		{name: "conmon is a unit, not the container", file: "0::/system.slice/crio-conmon-" + ctrID + ".scope\n", unit: "crio-conmon-" + ctrID + ".scope"},
		{name: "host service", file: "0::/system.slice/kubelet.service\n", unit: "kubelet.service"},
		{name: "login session", file: "0::/user.slice/user-0.slice/session-4.scope\n", unit: "session-4.scope"},
		{name: "cgroup v1, systemd line", file: "12:cpu,cpuacct:/kubepods/pod1/" + ctrID + "\n1:name=systemd:/system.slice/containerd.service\n", unit: "containerd.service"},
		{name: "from a cgroup namespace", file: "0::/../../kubepods/besteffort/pod1/" + ctrID + "\n", id: ctrID},
		{name: "short id", file: "0::/kubepods/pod1/cri-containerd-0123.scope\n", unit: "cri-containerd-0123.scope"},
		{name: "upper-case hex is not an id", file: "0::/kubepods/pod1/" + strings.ToUpper(ctrID) + "\n"},
		{name: "root", file: "0::/\n"},
		{name: "garbage", file: "\x00\n:::\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, unit := placeCgroup(tt.file)
			if id != tt.id || unit != tt.unit {
				t.Errorf("placeCgroup = %q, %q; want %q, %q", id, unit, tt.id, tt.unit)
			}
		})
	}
}

// proc writes a fixture /proc entry for pid.
func proc(t *testing.T, root string, pid, ppid int, comm, start, cgroup string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (%s) S %d 1 1 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 %s 1000 100 0\n", pid, comm, ppid, start)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if cgroup != "" {
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriter(t *testing.T) {
	root := t.TempDir()
	proc(t, root, 100, 50, "sh", "7", "0::/kubepods/pod1/"+ctrID+"\n")
	proc(t, root, 200, 100, "iptables-nft", "9", "0::/kubepods/pod1/"+ctrID+"\n")
	proc(t, root, 300, 1, "a) S 1 (evil", "9", "0::/system.slice/evil.service\n")
	proc(t, root, 400, 1, "reused", "9", "0::/\n")
	tests := []struct {
		name string
		pid  int
		comm string
		want findings.Writer
	}{
		{name: "container process", pid: 200, comm: "iptables-nft", want: findings.Writer{PID: 200, Comm: "iptables-nft", PPID: 100, ParentComm: "sh", ContainerID: ctrID}},
		{name: "parenthesis in the command", pid: 300, comm: "a) S 1 (evil", want: findings.Writer{PID: 300, Comm: "a) S 1 (evil", PPID: 1, Unit: "evil.service"}},
		{name: "exited", pid: 999, comm: "iptables-nft", want: findings.Writer{PID: 999, Comm: "iptables-nft", Gone: true}},
		{name: "pid reused by another command", pid: 400, comm: "iptables-nft", want: findings.Writer{PID: 400, Comm: "iptables-nft", Gone: true}},
		{name: "no pid", pid: 0, comm: "x", want: findings.Writer{Comm: "x", Gone: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Proc{Root: root}.Writer(tt.pid, tt.comm)
			if diff := cmp.Diff(tt.want, *got); diff != "" {
				t.Errorf("writer (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWriterReal describes the test's own process from the real /proc.
func TestWriterReal(t *testing.T) {
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip("no /proc")
	}
	comm := strings.TrimSuffix(string(b), "\n")
	w := Proc{Root: "/proc"}.Writer(os.Getpid(), comm)
	if w.Gone || w.PPID != os.Getppid() || w.ParentComm == "" {
		t.Errorf("writer %+v, want ppid %d and its command", w, os.Getppid())
	}
}

// TestWriterNestedCgroup: a process of a container that can write its
// cgroupfs makes a cgroup below its own named after another container
// and moves there; it is still its own container's, the one the runtime
// made above (it was named the nested one's). A real cgroup v2 tree,
// removed at the end.
func TestWriterNestedCgroup(t *testing.T) {
	nstest.NeedRoot(t, "sleep")
	root := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		root = "/sys/fs/cgroup"
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Skip("no cgroup v2 hierarchy")
	}
	other := strings.Repeat("f", 64)
	top, err := os.MkdirTemp(root, "ipta-test-")
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(top, "cri-containerd-"+ctrID+".scope")
	nested := filepath.Join(own, "cri-containerd-"+other+".scope")
	if err := os.MkdirAll(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		// A cgroup is removed once empty (the dead process leaves it).
		for _, d := range []string{nested, own, top} {
			if err := os.Remove(d); err != nil {
				t.Errorf("remove %s: %v", d, err)
			}
		}
	})
	if err := os.WriteFile(filepath.Join(nested, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	w := Proc{Root: "/proc"}.Writer(cmd.Process.Pid, "sleep")
	if w.Gone || w.ContainerID != ctrID {
		t.Errorf("writer %+v, want container %s (the outer cgroup's)", w, ctrID)
	}
}
