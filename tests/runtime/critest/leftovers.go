package critest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// Proc is a process a test left behind.
type Proc struct {
	PID     int
	Cmdline string
}

func (p Proc) String() string { return fmt.Sprintf("%d: %s", p.PID, p.Cmdline) }

// Leftovers lists the processes whose command line names one of marks (a
// runtime, a containerd shim's -address, conmon's paths, a kubelet's root)
// and all their descendants, which name nothing of the test: the `runc
// init` of a container a shim created but never started, the containers'
// own processes. Shims and conmon are subreapers, so a container's
// processes stay under them until they die.
func Leftovers(marks ...string) []Proc {
	cmdlines := map[int]string{}
	pids := nstest.ProcessTrees(func(pid int) bool {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		cmd := strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
		cmdlines[pid] = cmd
		for _, m := range marks {
			if m != "" && strings.Contains(cmd, m) {
				return true
			}
		}
		return false
	})
	out := make([]Proc, len(pids))
	for i, pid := range pids {
		out[i] = Proc{pid, cmdlines[pid]}
	}
	return out
}

// endLeftovers is the last resort of a runtime's cleanup, after its pods
// were removed through the CRI and it was stopped: what a failed test, or
// a runtime stopped in the middle of a call (a task created in a shim that
// the runtime never heard back about), left. First the containers in
// runc's state roots, so runc removes their cgroups too; then every
// process naming the runtime's dir, with its descendants, gathered before
// any is killed (a killed shim's children go to init, out of reach). Each
// is logged: the test's own check then finds nothing.
func (c *CRI) endLeftovers(runc string, roots ...string) {
	type left struct{ root, id string }
	var failed []left
	for _, root := range roots {
		out, err := exec.Command(runc, "--root", root, "list", "-q").Output()
		if err != nil {
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			c.t.Logf("cleanup: container %s left in %s", id, root)
			if out, err := exec.Command(runc, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				// "container init still running" 10 s after its
				// SIGKILL: a zombie its monitor has not reaped (CI
				// saw one under load), which goes with the monitor
				// below. Said, and tried again after it.
				c.t.Logf("cleanup: runc delete %s: %v: %s (init %s)", id, err, out, initState(runc, root, id))
				failed = append(failed, left{root, id})
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := Leftovers(c.Dir + "/")
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			c.t.Errorf("processes of %s still running after SIGKILL: %v", c.name, left)
			return
		}
		for _, p := range left {
			c.t.Logf("cleanup: process %v left", p)
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, l := range failed {
		if out, err := exec.Command(runc, "--root", l.root, "delete", "--force", l.id).CombinedOutput(); err != nil {
			c.t.Errorf("runc delete %s, its monitor gone: %v: %s (init %s)", l.id, err, out, initState(runc, l.root, l.id))
		}
	}
}

// initState says what the kernel says of a container's init: its
// state line (Z a zombie, D in the kernel) and where it waits, for a
// cleanup's message.
func initState(runc, root, id string) string {
	out, err := exec.Command(runc, "--root", root, "state", id).Output()
	if err != nil {
		return "unknown: " + err.Error()
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		return "unknown: " + string(out)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.Pid))
	wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", st.Pid))
	var state []string
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "State:") || strings.HasPrefix(l, "PPid:") {
			state = append(state, strings.Join(strings.Fields(l), " "))
		}
	}
	if len(state) == 0 {
		return fmt.Sprintf("pid %d: gone", st.Pid)
	}
	return fmt.Sprintf("pid %d: %s, wchan %s", st.Pid, strings.Join(state, ", "), wchan)
}
