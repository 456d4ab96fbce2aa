package main

// The agent's benchmarks. The runtime side is nri/pkg/adaptation, the
// library containerd 2.x and CRI-O (v0.11.0, the version go.mod holds)
// serve NRI with, run in this process; the agent is the real binary,
// connected to it over the NRI socket as it would be on a node. Pods are
// network namespaces this bench creates and fills with the real
// iptables-nft-restore.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"

	"github.com/iptables-alerter/iptables-alerter/internal/procstat"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nritest"
)

// agentBench holds the namespaces shared by the agent's benchmarks.
type agentBench struct {
	bin    string
	tmp    string
	run    string   // on a tmpfs, as /run on a node: runDir
	netns  []string // names under /run/netns
	kinds  []string
	ticks  float64 // clock ticks a second, for the children's CPU in /proc/PID/stat
	runNum int
}

// podKinds is the sweep's mix: a third each.
var podKinds = []struct {
	name  string
	rules int
}{{"clean", 0}, {"10 rules", 10}, {"1000 rules", 1000}}

// agentSet is which agent benches run, and the watch's settings.
type agentSet struct {
	watchIdle time.Duration
	debounces []time.Duration
	// only names the benches to run; empty: all.
	only map[string]bool
	// storm and stormRate are the exec bench's storm: its window, and
	// its runs a minute.
	storm     time.Duration
	stormRate int
}

func (s agentSet) runs(name string) bool { return len(s.only) == 0 || s.only[name] }

func runAgentBenches(bin string, pods, idlePods int, idle time.Duration, events, bigRules int, resweep time.Duration, set agentSet) error {
	nrilog.Set(nritest.Quiet{})
	tmp, err := os.MkdirTemp("", "iptalert-bench-agent")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	run, err := runDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	b := &agentBench{bin: bin, tmp: tmp, run: run, ticks: 100}
	defer b.cleanup()
	start := time.Now()
	for i := 0; i < pods; i++ {
		k := podKinds[i%len(podKinds)]
		ns := fmt.Sprintf("iptalert-bench-pod%d-%d", i, os.Getpid())
		if err := addNetns(ns); err != nil {
			return err
		}
		b.netns, b.kinds = append(b.netns, ns), append(b.kinds, k.name)
		if err := restore(plainRules(k.rules))(ns); err != nil {
			return err
		}
	}
	fmt.Printf("\nagent: load average %s (on %d CPUs; other processes' load shows in every wall time and in the runtime-side latency)\n", loadavg(), runtime.NumCPU())
	fmt.Printf("agent: %d pod netns created (%d clean, %d with 10 rules, %d with 1000 rules) in %s\n",
		pods, count(b.kinds, "clean"), count(b.kinds, "10 rules"), count(b.kinds, "1000 rules"), time.Since(start).Round(time.Millisecond))

	if set.runs("sweep") {
		if err := b.sweep(); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
	}
	if set.runs("watch") {
		if err := b.watch(min(100, len(b.netns)), set.watchIdle, set.debounces); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
	}
	if set.runs("writers") {
		if err := b.writers(min(100, len(b.netns))); err != nil {
			return fmt.Errorf("writers: %w", err)
		}
	}
	if idlePods > 0 && set.runs("idle") {
		if err := b.idleAndEvents(min(idlePods, len(b.netns)), idle, events, bigRules); err != nil {
			return fmt.Errorf("idle and events: %w", err)
		}
		if len(b.netns) > crashSweep+1 {
			if err := b.crashLoop(b.netns[len(b.netns)-1], bigRules); err != nil {
				return fmt.Errorf("crash loop: %w", err)
			}
		}
	}
	// Last: it gives a third of the pods legacy rules.
	if resweep > 0 && set.runs("resweep") {
		if err := b.resweep(resweep); err != nil {
			return fmt.Errorf("re-sweep: %w", err)
		}
	}
	// After it: it adds legacy rules too.
	if set.runs("exec") {
		if err := b.execs(min(100, len(b.netns)), set.storm, set.stormRate); err != nil {
			return fmt.Errorf("exec: %w", err)
		}
	}
	return nil
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func addNetns(ns string) error {
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	return nil
}

func (b *agentBench) cleanup() {
	for _, ns := range b.netns {
		exec.Command("ip", "netns", "del", ns).Run()
	}
}

// sweep compares the agent's registration sweep of every pod with what
// OpenShift's alerter runs per pod netns: nsenter + iptables-save, then
// nsenter + ip6tables-save, one after the other.
func (b *agentBench) sweep() error {
	// OpenShift's alerter: nsenter -n -t PID; --net=FILE is the same
	// setns, without a process to keep the namespace.
	var osWall, osCPU time.Duration
	for _, ns := range b.netns {
		for _, save := range []string{"iptables-save", "ip6tables-save"} {
			cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, save)
			d, err := timed(cmd)
			if err != nil {
				return fmt.Errorf("nsenter %s: %w", save, err)
			}
			osWall += d
			osCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
	}
	floor, err := dumpFloor(b.netns)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	r, err := b.startAgent(b.pods(len(b.netns)))
	if err != nil {
		return err
	}
	defer r.stop()
	if err := r.waitSweep(len(b.netns), 5*time.Minute); err != nil {
		return err
	}
	wall := r.swept.Sub(r.synced)
	self, children, err := cpuSplit(r.cmd.Process.Pid, b.ticks)
	if err != nil {
		return err
	}
	cpu := self + children
	rss, _ := statusKB(r.cmd.Process.Pid, "VmHWM")
	outcomes, _ := r.outcomes()
	fmt.Printf("agent sweep of %d pod netns (NRI Synchronize, %s), vs OpenShift's per-netns nsenter iptables-save + ip6tables-save:\n", len(b.netns), outcomes)
	fmt.Printf("  %-34s %10s %10s\n", "", "wall", "CPU")
	// The sweep is what the agent spends from Synchronize on; its start
	// (the runtime, flags, the connection) is printed apart below.
	sweepCPU := cpu - r.syncCPU
	fmt.Printf("  %-34s %10s %10s\n", "agent (Synchronize to last scan)", wall.Round(time.Millisecond), sweepCPU.Round(time.Millisecond))
	fmt.Printf("  %-34s %10s %10s\n", "nsenter + iptables-save x2", osWall.Round(time.Millisecond), osCPU.Round(time.Millisecond))
	fmt.Printf("  %-34s %10s %10s\n", "floor: the kernel's nftables dumps", "", floor.Round(time.Millisecond))
	fmt.Printf("  %-34s %9.3fx %9.3fx   (goal <= 0.1x CPU)\n", "ratio agent / saves", float64(wall)/float64(osWall), float64(sweepCPU)/float64(osCPU))
	fmt.Printf("  %-34s %10s %9.3fx   (floor / saves %.3fx; where 0.1x is below the floor, goal <= 1.5x the floor)\n", "ratio agent / floor", "", float64(sweepCPU)/float64(floor), float64(floor)/float64(osCPU))
	fmt.Printf("  agent CPU from its start: %s (%s before Synchronize), %s its own, %s its child processes (none since the agent reads legacy x_tables in-process); ratio to the saves counting its start %.3fx; peak RSS %d KiB\n",
		cpu.Round(time.Millisecond), r.syncCPU.Round(time.Millisecond), self.Round(time.Millisecond), children.Round(time.Millisecond), float64(cpu)/float64(osCPU), rss)
	return nil
}

// watch measures the watch (issue 19) with every pod watched: the
// agent's idle CPU and RSS with the watch off and on (the CPU of an idle
// window of the agent process, its threads' run time from schedstat,
// scaled to an hour); for each debounce, the time from a rule written
// (iptables-nft started) to its finding on disk, one write in each of n
// pods, and what a pod rewriting its rules without pause costs.
func (b *agentBench) watch(n int, idle time.Duration, debounces []time.Duration) error {
	type config struct {
		name     string
		args     []string
		debounce time.Duration
	}
	configs := []config{{name: "watch off", args: []string{"--watch=false"}}}
	for _, d := range debounces {
		configs = append(configs, config{fmt.Sprintf("watch on, debounce %s", d), []string{"--watch", "--watch-debounce", d.String()}, d})
	}
	fmt.Printf("\nagent watch, %d pod netns (idle CPU: the agent's threads over a %s idle window after its sweep, scaled to an hour; load average %s):\n",
		len(b.netns), idle, loadavg())
	var offCPU time.Duration
	var offRSS int64
	for i, c := range configs {
		r, err := b.startAgent(b.pods(len(b.netns)), c.args...)
		if err != nil {
			return err
		}
		err = b.watchRun(r, c.name, c.debounce, i == 0, n, idle, &offCPU, &offRSS)
		r.stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// watchRun measures one configuration of the watch bench on the running
// agent r; off is the watch-off run, which sets offCPU and offRSS.
func (b *agentBench) watchRun(r *agentRun, name string, debounce time.Duration, off bool, n int, idle time.Duration, offCPU *time.Duration, offRSS *int64) error {
	if err := r.waitSweep(len(b.netns), 5*time.Minute); err != nil {
		return err
	}
	pid := r.cmd.Process.Pid
	if !off {
		// Every monitor open: one netlink socket each.
		if err := waitSockets(pid, len(b.netns), 5*time.Minute); err != nil {
			return err
		}
	}
	cpu, window, started, err := idleCPU(pid, b.ticks, idle)
	if err != nil {
		return err
	}
	perHour := time.Duration(float64(cpu) * float64(time.Hour) / float64(window))
	rss, _ := statusKB(pid, "VmRSS")
	// The exec watch (on with the watch) wakes for every process the node
	// starts: those of the window say what its idle CPU answered.
	startedLine := fmt.Sprintf("    the node started %d processes in the idle window\n", started)
	if off {
		*offCPU, *offRSS = perHour, rss
		fmt.Printf("  %-28s idle CPU %8s per hour, RSS %6d KiB%s\n", name, perHour.Round(time.Millisecond), rss, rssParts(pid))
		fmt.Print(startedLine)
		r.printRuntimeMemory()
		return nil
	}
	fmt.Printf("  %-28s idle CPU %8s per hour (%+s vs off; goal <= +50ms), RSS %6d KiB (%+d KiB vs off; goal <= +20 MB, and <= 20 MB in all)%s\n",
		name, perHour.Round(time.Millisecond), (perHour - *offCPU).Round(time.Millisecond), rss, rss-*offRSS, rssParts(pid))
	fmt.Print(startedLine)
	r.printRuntimeMemory()

	var lat []time.Duration
	for j := 0; j < n; j++ {
		d, err := r.writeToFinding(b.netns[j], pod(j, b.netns[j]).Id, j)
		if err != nil {
			return err
		}
		lat = append(lat, d)
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	fmt.Printf("    rule written (iptables-nft started) to finding on disk, %d writes: p50 %s, p99 %s, max %s (goal p99 <= 100ms); less the debounce: p50 %s, p99 %s\n",
		n, p50.Round(time.Millisecond), p99.Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond),
		(p50 - debounce).Round(time.Millisecond), (p99 - debounce).Round(time.Millisecond))
	// Pods n and n+1 are not written to above; with the pods' kinds in
	// turn, one has 10 rules, the other 1000 (or none, with fewer pods).
	burstNS, scriptNS := b.netns[n%len(b.netns)], b.netns[(n+1)%len(b.netns)]
	if b.kinds[n%len(b.netns)] != "1000 rules" {
		burstNS, scriptNS = scriptNS, burstNS
	}
	if err := r.script(scriptNS, debounce, 20); err != nil {
		return err
	}
	return r.burst(burstNS, debounce, 3*time.Second, b.ticks)
}

// script runs k iptables-nft commands one after the other in ns, as a
// pod's setup script does: each window that ends amid them scans (and
// records) a partial ruleset, so a shorter debounce records more findings
// for one setup.
func (r *agentRun) script(ns string, debounce time.Duration, k int) error {
	m0, err := r.scrape()
	if err != nil {
		return err
	}
	var b strings.Builder
	for i := 0; i < k; i++ {
		fmt.Fprintf(&b, "iptables-nft -A OUTPUT -d 10.98.0.%d -j DROP || exit 1\n", i+1)
	}
	start := time.Now()
	if out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", b.String()).CombinedOutput(); err != nil {
		return fmt.Errorf("script in %s: %v: %s", ns, err, out)
	}
	took := time.Since(start)
	var scans, recorded float64
	for last, stable := -1.0, 0; stable < 2; time.Sleep(debounce + 100*time.Millisecond) {
		m, err := r.scrape()
		if err != nil {
			return err
		}
		scans = m.sum("iptables_alerter_agent_scans_total", `source="watch"`) - m0.sum("iptables_alerter_agent_scans_total", `source="watch"`)
		recorded = m.sum("iptables_alerter_agent_scans_total", `source="watch"`, `outcome="recorded"`) - m0.sum("iptables_alerter_agent_scans_total", `source="watch"`, `outcome="recorded"`)
		if scans == last {
			stable++
		} else {
			last, stable = scans, 0
		}
	}
	fmt.Printf("    a setup script of %d iptables-nft commands (%s): %.0f watch scans, %.0f findings recorded\n", k, took.Round(time.Millisecond), scans, recorded)
	return nil
}

// burst has one pod (with 1000 rules, if any has) rewrite a rule without
// pause for d: iptables-nft -A then -D in a loop, each a commit. The
// watch's scans are bounded by one per debounce window (plus the last
// window's); the agent's CPU over the burst and its scans' end is what
// such a pod costs.
func (r *agentRun) burst(ns string, debounce, d time.Duration, ticks float64) error {
	m0, err := r.scrape()
	if err != nil {
		return err
	}
	pid := r.cmd.Process.Pid
	cpu0, err := cpuOf(pid, ticks)
	if err != nil {
		return err
	}
	script := fmt.Sprintf("n=0; end=$(($(date +%%s%%N)+%d)); while [ $(date +%%s%%N) -lt $end ]; do iptables-nft -A INPUT -j ACCEPT && iptables-nft -D INPUT -j ACCEPT || exit 1; n=$((n+2)); done; echo $n", d.Nanoseconds())
	start := time.Now()
	out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", script).CombinedOutput()
	if err != nil {
		return fmt.Errorf("burst in %s: %v: %s", ns, err, out)
	}
	took := time.Since(start)
	commits, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	// The last window's scan: counted once the count stops moving for
	// two windows after the burst.
	scans := 0.0
	for last, stable := -1.0, 0; stable < 2; time.Sleep(debounce + 100*time.Millisecond) {
		m, err := r.scrape()
		if err != nil {
			return err
		}
		scans = m.sum("iptables_alerter_agent_scans_total", `source="watch"`) - m0.sum("iptables_alerter_agent_scans_total", `source="watch"`)
		if scans == last {
			stable++
		} else {
			last, stable = scans, 0
		}
	}
	cpu1, err := cpuOf(pid, ticks)
	if err != nil {
		return err
	}
	bound := int(took/debounce) + 1
	fmt.Printf("    a pod of 1000 rules rewriting without pause for %s: %d commits, %.0f watch scans (bound: one per window, %d), agent CPU %s (%.0f%% of one CPU over the burst)\n",
		took.Round(time.Millisecond), commits, scans, bound, (cpu1 - cpu0).Round(time.Millisecond), 100*float64(cpu1-cpu0)/float64(took))
	return nil
}

// idleCPU is process pid's CPU over an idle window of about idle, and the
// window, begun 2 s from now: the sweep's garbage collected first.
func idleCPU(pid int, ticks float64, idle time.Duration) (cpu, window time.Duration, started int64, err error) {
	time.Sleep(2 * time.Second)
	cpu0, err := cpuOf(pid, ticks)
	if err != nil {
		return 0, 0, 0, err
	}
	f0, t0 := forks(), time.Now()
	time.Sleep(idle)
	cpu1, err := cpuOf(pid, ticks)
	if err != nil {
		return 0, 0, 0, err
	}
	return cpu1 - cpu0, time.Since(t0), forks() - f0, nil
}

// waitSockets waits until process pid holds at least n sockets.
func waitSockets(pid, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		got := 0
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:") {
				got++
			}
		}
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sockets open in the agent, want %d monitors", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeToFinding writes a rule into ns and waits for the watch's finding
// of sandbox id in the findings file.
func (r *agentRun) writeToFinding(ns, id string, j int) (time.Duration, error) {
	off := r.findingsSize()
	start := time.Now()
	if out, err := exec.Command("ip", "netns", "exec", ns, "iptables-nft", "-A", "INPUT", "-s", fmt.Sprintf("10.99.%d.%d", j/250, j%250+1), "-j", "DROP").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("iptables-nft in %s: %v: %s", ns, err, out)
	}
	if _, err := r.watchFinding(off, id); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// findingsSize is where the next finding will start in the findings file.
func (r *agentRun) findingsSize() int64 {
	if st, _ := os.Stat(r.findings); st != nil {
		return st.Size()
	}
	return 0
}

// watchFinding waits for a watch finding of sandbox id written past off
// in the findings file, and returns its line.
func (r *agentRun) watchFinding(off int64, id string) (string, error) {
	return r.finding(off, id, time.Minute, `"source":"watch"`)
}

// idleAndEvents runs the agent with idlePods pods: its sweep, an idle
// window, then a stream of NRI events with a 200k-rule netns among the
// pods, timing each call on the runtime side and reading the agent's own
// handler histogram.
func (b *agentBench) idleAndEvents(idlePods int, idle time.Duration, events, bigRules int) error {
	big := fmt.Sprintf("iptalert-bench-big-%d", os.Getpid())
	start := time.Now()
	if err := addNetns(big); err != nil {
		return err
	}
	b.netns = append(b.netns, big)
	if err := restore(plainRules(bigRules))(big); err != nil {
		return err
	}
	fmt.Printf("\nagent: netns with %d rules created in %s\n", bigRules, time.Since(start).Round(time.Millisecond))
	pods := b.pods(idlePods)
	r, err := b.startAgent(pods)
	if err != nil {
		return err
	}
	defer r.stop()
	if err := r.waitSweep(idlePods, 5*time.Minute); err != nil {
		return err
	}
	pid := r.cmd.Process.Pid
	cpu, window, started, err := idleCPU(pid, b.ticks, idle)
	if err != nil {
		return err
	}
	rss, _ := statusKB(pid, "VmRSS")
	hwm, _ := statusKB(pid, "VmHWM")
	perHour := time.Duration(float64(cpu) * float64(time.Hour) / float64(window))
	fmt.Printf("agent idle, connected over NRI with %d pods swept: RSS %d KiB (peak %d KiB); CPU %s in %s idle = %s per hour (the node started %d processes meanwhile)\n",
		idlePods, rss, hwm, cpu.Round(time.Microsecond), window.Round(time.Second), perHour.Round(time.Millisecond), started)

	// Events: PostStartContainer and StopContainer in turn, one every 2 ms,
	// every 10th on the 200k-rule pod, whose scans then run in the
	// background while the others are answered.
	bigPod := pod(len(pods), big)
	var rtt []time.Duration
	ctx := context.Background()
	for i := 0; i < events; i++ {
		p := pods[i%len(pods)]
		if i%10 == 0 {
			p = bigPod
		}
		c := &api.Container{Id: fmt.Sprintf("c%d", i), PodSandboxId: p.Id, Name: "app", State: api.ContainerState_CONTAINER_RUNNING}
		t := time.Now()
		if i%2 == 0 {
			err = r.ad.PostStartContainer(ctx, &nri.StateChangeEvent{Pod: p, Container: c})
		} else {
			_, err = r.ad.StopContainer(ctx, &nri.StopContainerRequest{Pod: p, Container: c})
		}
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		rtt = append(rtt, time.Since(t))
		time.Sleep(2 * time.Millisecond)
	}
	// Let the queued scans finish, so the histogram is the whole run.
	time.Sleep(time.Second)
	sort.Slice(rtt, func(i, j int) bool { return rtt[i] < rtt[j] })
	fmt.Printf("handler latency, %d NRI events (PostStartContainer, StopContainer; every 10th on the %d-rule netns; load average %s):\n", events, bigRules, loadavg())
	fmt.Printf("  runtime side (NRI call round trip, exact):  p50 %s  p99 %s  max %s\n",
		rtt[len(rtt)/2].Round(time.Microsecond), rtt[len(rtt)*99/100].Round(time.Microsecond), rtt[len(rtt)-1].Round(time.Microsecond))
	h, err := r.handlerHistogram()
	if err != nil {
		return err
	}
	for _, ev := range []string{"PostStartContainer", "StopContainer"} {
		fmt.Printf("  agent's /metrics %-18s     p50 <= %s  p99 <= %s  (histogram bucket bounds, %d calls)\n",
			ev, h.quantile(ev, 0.5), h.quantile(ev, 0.99), h.total(ev))
	}
	outcomes, _ := r.outcomes()
	fmt.Printf("  scans after the events: %s\n", outcomes)
	rss, _ = statusKB(pid, "VmRSS")
	hwm, _ = statusKB(pid, "VmHWM")
	fmt.Printf("  agent RSS after the events %d KiB, peak %d KiB (the %d-rule netns scanned)\n", rss, hwm, bigRules)
	return nil
}

// crashSweep is the pods swept in the crash-loop run.
const crashSweep = 20

// crashSteady is how long the crash loop runs before the second ordinary
// pod's event: two of the big pods' scans, each to its deadline, and more.
const crashSteady = 6 * time.Second

// crashLoop times the registration sweep of crashSweep pods while two pods
// on the big netns crash-loop, a StopContainer and a PostStartContainer of
// each every 10 ms from the moment the runtime synchronized, then an
// ordinary pod's event amid them (issue 18 item 1: before the fair queue,
// no pod of the sweep was scanned).
func (b *agentBench) crashLoop(big string, bigRules int) error {
	pods := b.pods(crashSweep)
	slow := []*api.PodSandbox{pod(crashSweep, big), pod(crashSweep+1, big)}
	// The two are not in Synchronize's list: their events' scans would
	// cover their sweep's, and the sweep's count would not tell. The watch
	// is off: it would scan the ordinary pod's new rule first, and the
	// event's scan, joining it, would record no container.
	r, err := b.startAgent(pods, "--watch=false")
	if err != nil {
		return err
	}
	defer r.stop()
	select {
	case r.synced = <-r.syncCh:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("agent did not register with the NRI runtime")
	}
	ctx := context.Background()
	stop, looped := make(chan struct{}), make(chan error, 1)
	go func() {
		looped <- func() error {
			for i := 0; ; i++ {
				for _, p := range slow {
					c := &api.Container{Id: fmt.Sprintf("crash%d", i), PodSandboxId: p.Id, Name: "app", State: api.ContainerState_CONTAINER_RUNNING}
					if _, err := r.ad.StopContainer(ctx, &nri.StopContainerRequest{Pod: p, Container: c}); err != nil {
						return err
					}
					if err := r.ad.PostStartContainer(ctx, &nri.StateChangeEvent{Pod: p, Container: c}); err != nil {
						return err
					}
				}
				select {
				case <-stop:
					return nil
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
	}()
	defer func() {
		close(stop)
		<-looped
	}()
	if err := r.waitSwept(len(pods), 5*time.Minute); err != nil {
		return err
	}
	// An ordinary pod with a new rule: its PostStartContainer's scan
	// writes a finding.
	ordinary := func(i int) (time.Duration, error) {
		p, id := pods[i], fmt.Sprintf("ordinary%d", i)
		if err := exec.Command("ip", "netns", "exec", b.netns[i], "iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "9", "-j", "DROP").Run(); err != nil {
			return 0, fmt.Errorf("add a rule: %w", err)
		}
		sent := time.Now()
		c := &api.Container{Id: id, PodSandboxId: p.Id, Name: "app", State: api.ContainerState_CONTAINER_RUNNING}
		if err := r.ad.PostStartContainer(ctx, &nri.StateChangeEvent{Pod: p, Container: c}); err != nil {
			return 0, err
		}
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
			if data, _ := os.ReadFile(r.findings); strings.Contains(string(data), `"container_id":"`+id+`"`) {
				return time.Since(sent), nil
			} else if time.Now().After(deadline) {
				return 0, fmt.Errorf("the ordinary pod's event was not scanned")
			}
		}
	}
	// Right after the sweep: the crash-looping pods' first scans may hold
	// both workers, since nothing tells yet that they run to the deadline.
	event, err := ordinary(1)
	if err != nil {
		return err
	}
	// Once the loop has run a while, as on a node where it goes on for
	// hours: their scans have run out before, so they hold one worker.
	time.Sleep(crashSteady)
	steady, err := ordinary(2)
	if err != nil {
		return err
	}
	outcomes, _ := r.outcomes()
	fmt.Printf("\nagent with two pods on the %d-rule netns crash-looping (StopContainer + PostStartContainer every 10 ms each; load average %s):\n", bigRules, loadavg())
	fmt.Printf("  sweep of %d pods, Synchronize to last scan:          %s (goal <= 10s)\n", len(pods), r.swept.Sub(r.synced).Round(time.Millisecond))
	fmt.Printf("  an ordinary pod's PostStartContainer to its finding:  %s (goal <= 2s); after %s more of the loop: %s\n",
		event.Round(time.Millisecond), crashSteady, steady.Round(time.Millisecond))
	fmt.Printf("  scans: %s\n", outcomes)
	return nil
}

// pods is the first n namespaces as NRI pod sandboxes.
func (b *agentBench) pods(n int) []*api.PodSandbox {
	var ps []*api.PodSandbox
	for i := 0; i < n; i++ {
		ps = append(ps, pod(i, b.netns[i]))
	}
	return ps
}

func pod(i int, ns string) *api.PodSandbox {
	return &api.PodSandbox{Id: fmt.Sprintf("sb%d-%s", i, ns), Name: fmt.Sprintf("p%d", i), Namespace: "bench", Uid: fmt.Sprintf("u%d", i),
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: "/run/netns/" + ns}}}}
}

// agentRun is one agent process connected to an in-process NRI runtime.
type agentRun struct {
	cmd      *exec.Cmd
	findings string
	ad       *nri.Adaptation
	metrics  string
	synced   time.Time
	swept    time.Time
	syncCh   chan time.Time
	// ready is set once the runtime side started, whose Start
	// synchronizes its pre-installed plugins (none) first; pid is the
	// agent's, set once it started; syncCPU is its CPU when the runtime's
	// Synchronize of it began (its start, flags and connection).
	ready   atomic.Bool
	pid     atomic.Int64
	syncCPU time.Duration
	cpuCh   chan time.Duration
}

func (b *agentBench) startAgent(pods []*api.PodSandbox, args ...string) (*agentRun, error) {
	return b.startAgentWith(pods, nil, nil, args...)
}

// startAgentWith starts the agent with the containers Synchronize lists
// beside the pods, and its command run through prefix (a command taking
// the agent's as its arguments).
func (b *agentBench) startAgentWith(pods []*api.PodSandbox, ctrs []*api.Container, prefix []string, args ...string) (*agentRun, error) {
	b.runNum++
	dir := filepath.Join(b.tmp, fmt.Sprint(b.runNum))
	state := filepath.Join(b.run, fmt.Sprint(b.runNum))
	for _, d := range []string{dir, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	r := &agentRun{syncCh: make(chan time.Time, 1), cpuCh: make(chan time.Duration, 1)}
	ad, sock, err := nritest.Start(dir, func(ctx context.Context, cb nri.SyncCB) error {
		if !r.ready.Load() {
			_, err := cb(ctx, pods, ctrs)
			return err
		}
		// Read before the sweep begins: the read is the bench's work.
		var cpu time.Duration
		if pid := int(r.pid.Load()); pid != 0 {
			cpu, _ = cpuOf(pid, b.ticks)
		}
		select {
		case r.syncCh <- time.Now():
			r.cpuCh <- cpu
		default:
		}
		_, err := cb(ctx, pods, ctrs)
		return err
	})
	if err != nil {
		return nil, err
	}
	r.ready.Store(true)
	r.ad = ad
	port, err := freePort()
	if err != nil {
		ad.Stop()
		return nil, err
	}
	r.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		ad.Stop()
		return nil, err
	}
	defer logf.Close()
	r.findings = filepath.Join(dir, "findings.jsonl")
	r.cmd = exec.Command(b.bin, "agent", "--nri-socket", sock, "--findings", r.findings,
		"--state-dir", state, "--allowlist", "", "--health-addr", fmt.Sprintf("127.0.0.1:%d", port),
		// Every pod here has a namespace of its own: no host-network pod
		// to tell apart, and pid 1's namespace may be closed to a sandbox.
		"--host-proc", "")
	r.cmd.Args = append(r.cmd.Args, args...)
	if len(prefix) > 0 {
		r.cmd = exec.Command(prefix[0], append(prefix[1:], r.cmd.Args...)...)
	}
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		ad.Stop()
		return nil, fmt.Errorf("start agent: %w", err)
	}
	r.pid.Store(int64(r.cmd.Process.Pid))
	return r, nil
}

// logTail is the last n bytes of the agent's log, for an error.
func (r *agentRun) logTail(n int64) string {
	f, err := os.Open(filepath.Join(filepath.Dir(r.findings), "agent.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(fi.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (r *agentRun) stop() {
	r.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		<-done
	}
	r.ad.Stop()
}

// waitSweep waits for the runtime's Synchronize, then until the agent's
// /metrics count n sweep scans.
func (r *agentRun) waitSweep(n int, limit time.Duration) error {
	select {
	case r.synced = <-r.syncCh:
	case <-time.After(limit):
		return fmt.Errorf("agent did not register with the NRI runtime in %s", limit)
	}
	r.syncCPU = <-r.cpuCh
	return r.waitSwept(n, limit)
}

// waitSwept waits until the agent's /metrics count n sweep scans.
func (r *agentRun) waitSwept(n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		m, err := r.scrape()
		if err == nil && m.sum("iptables_alerter_agent_scans_total", `source="sweep"`) >= float64(n) {
			r.swept = time.Now()
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return fmt.Errorf("agent did not sweep %d pods in %s", n, limit)
}

// promLines is a /metrics page: one sample a line, name{labels} value.
type promLines []string

// plainHTTP asks for /metrics uncompressed: the agent's CPU is measured
// whole, and gzipping its page for every poll of waitSwept (every 25 ms)
// was a tenth of what its first sweep was charged (docs/performance.md).
var plainHTTP = &http.Client{Transport: &http.Transport{DisableCompression: true}}

func (r *agentRun) scrape() (promLines, error) {
	resp, err := plainHTTP.Get(r.metrics)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var lines promLines
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	for sc.Scan() {
		if l := sc.Text(); !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

// sum adds the samples of name whose labels contain every one of labels.
func (m promLines) sum(name string, labels ...string) float64 {
	var total float64
	for _, l := range m {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		ok := true
		for _, lb := range labels {
			ok = ok && strings.Contains(l, lb)
		}
		if i := strings.LastIndexByte(l, ' '); ok && i > 0 {
			v, _ := strconv.ParseFloat(l[i+1:], 64)
			total += v
		}
	}
	return total
}

// outcomes is the agent's scan counts by source and outcome, for the
// report.
func (r *agentRun) outcomes() (string, error) {
	m, err := r.scrape()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, l := range m {
		if strings.HasPrefix(l, "iptables_alerter_agent_scans_total{") {
			parts = append(parts, strings.TrimPrefix(l, "iptables_alerter_agent_scans_total"))
		}
	}
	return strings.Join(parts, ", "), nil
}

type histogram promLines

func (r *agentRun) handlerHistogram() (histogram, error) {
	m, err := r.scrape()
	return histogram(m), err
}

const handlerMetric = "iptables_alerter_agent_handler_duration_seconds"

func (h histogram) total(event string) int {
	return int(promLines(h).sum(handlerMetric+"_count", `event="`+event+`"`))
}

// quantile is the upper bound of the bucket holding quantile q.
func (h histogram) quantile(event string, q float64) string {
	type bucket struct {
		le    float64
		count float64
	}
	var bs []bucket
	for _, l := range h {
		if !strings.HasPrefix(l, handlerMetric+"_bucket{") || !strings.Contains(l, `event="`+event+`"`) {
			continue
		}
		i := strings.Index(l, `le="`)
		j := strings.Index(l[i+4:], `"`)
		le, err := strconv.ParseFloat(l[i+4:i+4+j], 64)
		if err != nil { // +Inf
			le = -1
		}
		v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		bs = append(bs, bucket{le, v})
	}
	total := float64(h.total(event))
	for _, b := range bs {
		if b.le >= 0 && b.count >= q*total {
			return time.Duration(b.le * float64(time.Second)).String()
		}
	}
	return "beyond the last bucket"
}

// cpuOf is the CPU time of process pid: every thread's run time (ns, from
// schedstat) plus its waited-for children's (clock ticks).
func cpuOf(pid int, ticks float64) (time.Duration, error) {
	self, children, err := cpuSplit(pid, ticks)
	return self + children, err
}

// cpuSplit is cpuOf's two parts: the process's own, its children's.
func cpuSplit(pid int, ticks float64) (self, children time.Duration, err error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, 0, fmt.Errorf("read schedstat of %d: %v", pid, err)
	}
	var ns int64
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(data))
		if len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			ns += v
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The reaped children's user and system time.
	s := procstat.Of(stat)
	cu, _ := strconv.ParseFloat(s.Field(16), 64)
	cs, _ := strconv.ParseFloat(s.Field(17), 64)
	return time.Duration(ns), time.Duration((cu + cs) / ticks * float64(time.Second)), nil
}

// statusKB is one "Vm..." line of /proc/PID/status, in KiB.
func statusKB(pid int, key string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, key+":") {
			f := strings.Fields(l)
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

// rssParts is where process pid's RSS is: its anonymous memory (heap,
// stacks, the runtime's) and the file-backed pages (the binary's touched).
func rssParts(pid int) string {
	anon, err1 := statusKB(pid, "RssAnon")
	file, err2 := statusKB(pid, "RssFile")
	if err1 != nil || err2 != nil {
		return ""
	}
	return fmt.Sprintf(" (anonymous %d, file-backed %d)", anon, file)
}

// printRuntimeMemory prints the Go runtime's own account of the agent's
// memory, from its /metrics (read after the RSS: the scrape allocates).
func (r *agentRun) printRuntimeMemory() {
	m, err := r.scrape()
	if err != nil {
		return
	}
	kib := func(name string) int64 { return int64(m.sum(name)) / 1024 }
	fmt.Printf("    Go runtime: heap in use %d KiB, freed and not returned %d KiB, stacks %d KiB (%d goroutines), GC metadata %d KiB, other %d KiB\n",
		kib("go_memstats_heap_inuse_bytes"), kib("go_memstats_heap_idle_bytes")-kib("go_memstats_heap_released_bytes"),
		kib("go_memstats_stack_inuse_bytes"), int64(m.sum("go_goroutines")), kib("go_memstats_gc_sys_bytes"),
		kib("go_memstats_other_sys_bytes")+kib("go_memstats_mspan_inuse_bytes")+kib("go_memstats_mcache_inuse_bytes")+kib("go_memstats_buck_hash_sys_bytes"))
}

// loadavg is the machine's 1-minute load average.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(data))[0]
}
