package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// writers measures how often the watch names the container of a one-shot
// writer under load (issue 25): one iptables-nft -A in each of n pods, run
// by a shell that reaps it at once, in a cgroup named as containerd's
// cgroupfs driver names a container's (its id), while a busy loop runs on
// every CPU. A writer is attributed when its pod's watch finding names that
// container, not gone. Run twice: as the agent runs on a node (its watch
// reader at real-time priority), and without CAP_SYS_NICE (setpriv), the
// reader then at normal priority.
func (b *agentBench) writers(n int) error {
	dir, ctrs, cleanup, err := b.containers(n)
	if err != nil {
		return err
	}
	defer cleanup()
	pods := b.pods(n)
	stop, err := spin(runtime.NumCPU())
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("\nagent watch, one-shot writers under load (a busy loop on each of %d CPUs; load average %s): one iptables-nft -A in each of %d pods, its shell reaping it at once\n",
		runtime.NumCPU(), loadavg(), n)
	for _, c := range []struct {
		name   string
		prefix []string
	}{{"real-time reader", nil}, {"no CAP_SYS_NICE", []string{"setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"}}} {
		if c.prefix != nil {
			if _, err := exec.LookPath(c.prefix[0]); err != nil {
				fmt.Printf("  %-18s skipped: no %s\n", c.name, c.prefix[0])
				continue
			}
		}
		if err := b.writersRun(c.name, c.prefix, pods, ctrs, dir); err != nil {
			return err
		}
	}
	return nil
}

func (b *agentBench) writersRun(name string, prefix []string, pods []*api.PodSandbox, ctrs []*api.Container, dir string) error {
	// The agent's host /proc: pid 1's netns is this process's (the real
	// pid 1's may be closed to a sandbox), and the pids the writers will
	// take, which cannot be shown once they run.
	hostProc := filepath.Join(b.tmp, fmt.Sprintf("proc-%d", b.runNum+1))
	if err := os.MkdirAll(filepath.Join(hostProc, "1", "ns"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("/proc/self/ns/net", filepath.Join(hostProc, "1", "ns", "net")); err != nil {
		return err
	}
	if err := nstest.ShowNextPids(hostProc, 20000); err != nil {
		return err
	}
	r, err := b.startAgentWith(pods, ctrs, prefix, "--watch", "--host-proc", hostProc)
	if err != nil {
		return err
	}
	defer r.stop()
	if err := r.waitSweep(len(pods), 5*time.Minute); err != nil {
		return err
	}
	if err := waitSockets(r.cmd.Process.Pid, len(pods), 5*time.Minute); err != nil {
		return err
	}
	attributed, gone := 0, 0
	var missed []string
	for i, p := range pods {
		w, err := r.oneShot(b.netns[i], p.Id, filepath.Join(dir, ctrs[i].Id), i)
		if err != nil {
			return err
		}
		switch {
		case w == nil:
			missed = append(missed, "no writer")
		case w.ContainerID == ctrs[i].Id && w.Container == ctrs[i].Name && !w.Gone:
			attributed++
		case w.Gone:
			gone++
		default:
			missed = append(missed, fmt.Sprintf("%+v", *w))
		}
	}
	fmt.Printf("  %-18s attributed to their container %d of %d (goal >= 99 of 100), gone %d, other %d\n", name, attributed, len(pods), gone, len(missed))
	for _, m := range missed[:min(3, len(missed))] {
		fmt.Printf("    not attributed: %s\n", m)
	}
	return nil
}

// oneShot runs iptables-nft -A once in ns from a shell in cgroup, and
// returns the writer of the sandbox's watch finding that follows.
func (r *agentRun) oneShot(ns, id, cgroup string, j int) (*findings.Writer, error) {
	off := r.findingsSize()
	script := fmt.Sprintf("echo $$ > %s/cgroup.procs && exec ip netns exec %s sh -c 'iptables-nft -A INPUT -s 10.97.%d.%d -j DROP; exit $?'",
		cgroup, ns, j/250, j%250+1)
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("one-shot iptables-nft in %s: %v: %s", ns, err, out)
	}
	line, err := r.watchFinding(off, id)
	if err != nil {
		return nil, err
	}
	var rec findings.Record
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		return nil, fmt.Errorf("finding of %s: %w", id, err)
	}
	return rec.Writer, nil
}

// cgroupRoot is the cgroup v2 hierarchy: /sys/fs/cgroup, or its unified
// part on a hybrid v1 host (/proc/PID/cgroup's "0::" line, which the
// agent reads first).
func cgroupRoot() (string, error) {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 hierarchy under /sys/fs/cgroup")
}

// spin runs a busy loop on each of n CPUs until stop.
func spin(n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}
