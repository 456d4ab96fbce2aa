package main

import (
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// resweep measures the agent's re-sweep of unchanged pods (issue 19 item
// 3): the agent, its registration sweep done, re-sweeps every interval;
// every pod is unchanged, so each re-sweep reads each netns's State and
// skips it. Its CPU over a window of re-sweeps (idle time included, so an
// upper bound) is compared with what OpenShift's alerter runs on the same
// namespaces in the same run: nsenter --net=NS iptables-save, then
// ip6tables-save, per netns (rusage of each).
func (b *agentBench) resweep(window time.Duration) error {
	n := len(b.kinds)
	// A third of the pods keep legacy rules too, so the legacy half of
	// the State (a copy of each table under the x_tables mutex) is paid.
	legacy := 0
	if _, err := exec.LookPath("iptables-legacy-restore"); err == nil {
		for i, k := range b.kinds {
			if k != "10 rules" {
				continue
			}
			cmd := exec.Command("ip", "netns", "exec", b.netns[i], "iptables-legacy-restore")
			cmd.Stdin = strings.NewReader(plainRules(10))
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("iptables-legacy-restore: %v: %s", err, out)
			}
			legacy++
		}
	}
	var osCPU time.Duration
	for _, ns := range b.netns[:n] {
		for _, save := range []string{"iptables-save", "ip6tables-save"} {
			cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, save)
			if _, err := timed(cmd); err != nil {
				return fmt.Errorf("nsenter %s: %w", save, err)
			}
			osCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
	}
	const interval = time.Second
	r, err := b.startAgent(b.pods(n), "--resweep-interval", interval.String())
	if err != nil {
		return err
	}
	defer r.stop()
	if err := r.waitSweep(n, 5*time.Minute); err != nil {
		return err
	}
	// Re-sweeps that ran during the sweep queued the pods not scanned yet;
	// the window starts once one re-sweep skipped every pod.
	skipped := func() (float64, float64, error) {
		m, err := r.scrape()
		return m.sum("iptables_alerter_agent_resweep_netns_total", `stage="Resweep"`, `result="skipped"`),
			m.sum("iptables_alerter_agent_resweep_netns_total", `stage="Resweep"`, `result="queued"`), err
	}
	var s0, q0 float64
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(interval / 4) {
		s, q, err := skipped()
		if err == nil && s > 0 && q == q0 && s-s0 >= float64(n) {
			s0 = s
			break
		}
		s0, q0 = s, q
		if time.Now().After(deadline) {
			return fmt.Errorf("no re-sweep skipped all %d pods in 2 minutes (skipped %v, queued %v)", n, s, q)
		}
	}
	pid := r.cmd.Process.Pid
	cpu0, err := cpuOf(pid, b.ticks)
	if err != nil {
		return err
	}
	s0, q0, _ = skipped()
	time.Sleep(window)
	cpu1, err := cpuOf(pid, b.ticks)
	if err != nil {
		return err
	}
	s1, q1, err := skipped()
	if err != nil {
		return err
	}
	sweeps := (s1 - s0) / float64(n)
	if sweeps < 1 || q1 != q0 {
		return fmt.Errorf("in %s: %v pods skipped, %v queued; want whole re-sweeps of %d unchanged pods", window, s1-s0, q1-q0, n)
	}
	per := time.Duration(float64(cpu1-cpu0) / sweeps)
	hwm, _ := statusKB(pid, "VmHWM")
	fmt.Printf("\nagent re-sweep of %d unchanged pod netns (%d with legacy rules too; --resweep-interval %s, %.0f re-sweeps in %s):\n",
		n, legacy, interval, sweeps, window)
	fmt.Printf("  %-40s %10s\n", "", "CPU")
	fmt.Printf("  %-40s %10s\n", "agent, one re-sweep (idle time included)", per.Round(10*time.Microsecond))
	fmt.Printf("  %-40s %10s\n", "nsenter + iptables-save x2, every netns", osCPU.Round(time.Millisecond))
	fmt.Printf("  %-40s %9.4fx   (target <= 0.05x)\n", "ratio", float64(per)/float64(osCPU))
	fmt.Printf("  agent peak RSS %d KiB\n", hwm)
	return nil
}
