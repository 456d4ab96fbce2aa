// Command bench compares the hook with what an admin (or OpenShift's own
// alerter) runs per pod, on the same network namespace in one run (and,
// with -agent-bin, the agent's sweep with OpenShift's per-netns
// nsenter + iptables-save, its idle cost, its NRI handler latency and its
// re-sweep of unchanged pods: see agent.go, resweep.go):
//
//	ip netns exec NS iptables-nft-save; ip netns exec NS ip6tables-nft-save
//
// For each ruleset size it alternates the two, so machine noise hits both
// alike, and prints the medians, their ratio and the hook's peak RSS. The
// hook runs alternately alone and as the shipped hooks.d command runs it
// (its `sh` and `timeout` guard), whose median and extra cost are printed
// beside, and the ratio of the CPU times (medians) last.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	hooksd "github.com/iptables-alerter/iptables-alerter/hooks.d"
)

func main() {
	bin := flag.String("bin", "bin/iptables-alerter", "hook binary to measure")
	runs := flag.Int("runs", 30, "runs of each command per size")
	sizes := flag.String("sizes", "0,10,10000", "ruleset sizes (rules in ip filter INPUT); empty skips the hook's table")
	comments := flag.Int("comment-rules", 1100, "rules of the comment-heavy case (each with 100 -m comment); 0 skips it")
	agentBin := flag.String("agent-bin", "", "a build with the agent command (make bench passes the agent-only build the image runs); empty skips the agent's benchmarks")
	pods := flag.Int("pods", 250, "agent: pod netns of the sweep (a third clean, a third 10 rules, a third 1000 rules)")
	idlePods := flag.Int("idle-pods", 100, "agent: pods of the idle and handler-latency runs; 0 skips those runs (the sweep alone)")
	idle := flag.Duration("idle", 60*time.Second, "agent: idle window measured")
	events := flag.Int("events", 2000, "agent: NRI events of the handler-latency run")
	bigRules := flag.Int("big-rules", 200000, "agent: rules in the netns scanned during the handler-latency run")
	resweep := flag.Duration("resweep-window", 10*time.Second, "agent: window over which the re-sweeps of the -pods unchanged netns are measured; 0 skips it")
	watchIdle := flag.Duration("watch-idle", 20*time.Second, "agent: idle window over which the watch's CPU (on vs off, -pods watched) is measured")
	debounces := flag.String("watch-debounces", "200ms,50ms", "agent: --watch-debounce values whose write-to-finding latency and burst cost are measured")
	only := flag.String("agent-benches", "", "agent: comma-separated benches to run of sweep, watch, writers (one-shot writers attributed under load), idle (idle, events, crash loop), resweep, exec (the exec watch: command to finding, CPU under an exec storm, one-shot commands attributed under load); empty runs all")
	storm := flag.Duration("exec-storm", time.Minute, "agent exec: window of the exec storm whose CPU is measured; 0 skips it")
	stormRate := flag.Int("exec-storm-rate", 10000, "agent exec: runs of /bin/true a minute in the exec storm")
	startRuns := flag.Int("start-runs", 500, "runs of 'BIN version', the start cost every hook run pays before any work; 0 skips it")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: must run as root (it creates network namespaces)")
		os.Exit(1)
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		fail(err)
	}
	if *startRuns > 0 {
		if err := benchStart(abs, *startRuns); err != nil {
			fail(err)
		}
	}
	if *sizes != "" {
		// floor: the CPU of the kernel's nftables dumps of the same netns
		// read by one thread decoding nothing (dumpFloor), over the saves'.
		fmt.Printf("%-12s %12s %12s %7s %12s %12s %10s %10s %10s\n", "rules", "hook", "nft-save x2", "ratio", "hook maxrss", "hooks.d cmd", "guard adds", "cpu ratio", "floor")
	}
	for _, s := range strings.Split(*sizes, ",") {
		if s == "" {
			continue
		}
		var n int
		fmt.Sscan(s, &n)
		if err := benchRuleset(abs, fmt.Sprint(n), restore(plainRules(n)), *runs); err != nil {
			fail(err)
		}
	}
	if *comments > 0 {
		if err := benchRuleset(abs, fmt.Sprintf("%dx100c", *comments), commentRules(*comments, 100), *runs); err != nil {
			fail(err)
		}
	}
	if *agentBin != "" {
		abs, err := filepath.Abs(*agentBin)
		if err != nil {
			fail(err)
		}
		var ds []time.Duration
		for _, s := range strings.Split(*debounces, ",") {
			d, err := time.ParseDuration(s)
			if err != nil {
				fail(fmt.Errorf("-watch-debounces: %w", err))
			}
			ds = append(ds, d)
		}
		set := agentSet{watchIdle: *watchIdle, debounces: ds, only: map[string]bool{}, storm: *storm, stormRate: *stormRate}
		for _, s := range strings.Split(*only, ",") {
			if s != "" {
				set.only[s] = true
			}
		}
		if err := runAgentBenches(abs, *pods, *idlePods, *idle, *events, *bigRules, *resweep, set); err != nil {
			fail(err)
		}
	}
}

// plainRules is n ordinary rules in ip filter INPUT.
func plainRules(n int) string {
	if n == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -p tcp --dport %d -j ACCEPT\n", i>>16&255, i>>8&255, i&255, 1024+i%50000)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// commentRules adds n rules carrying c comments of 200 bytes each, a pod's
// own text: the most data a rule can make the hook hold (issue 7, item 13).
// One iptables-nft call per rule: iptables-nft-restore takes at most 255
// arguments a line.
func commentRules(n, c int) func(ns string) error {
	return func(ns string) error {
		args := []string{"netns", "exec", ns, "iptables-nft", "-A", "INPUT"}
		for j := 0; j < c; j++ {
			args = append(args, "-m", "comment", "--comment", fmt.Sprintf("%s%03d", strings.Repeat("x", 200), j))
		}
		args = append(args, "-j", "ACCEPT")
		for i := 0; i < n; i++ {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("iptables-nft: %v: %s", err, out)
			}
		}
		return nil
	}
}

// runDir makes a directory on a tmpfs for the per-sandbox memory
// (--state-dir) of the hook and the agent: on a node it is
// /run/iptables-alerter, and /run is a tmpfs on every systemd host (RHEL,
// RHCOS, Debian), while on this machine /run and the temp dir are on the
// root filesystem, where creating an entry costs more (ext4's inode
// allocation: 0.4 to 0.7 ms a 10-rule hook run on 2026-12-07). /dev/shm is
// the tmpfs a Linux host has; where it is none, the temp dir, said so.
func runDir() (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		fmt.Println("note: /dev/shm is not a tmpfs: the per-sandbox memory is on the temp dir's filesystem, not on a tmpfs as on a node")
		return os.MkdirTemp("", "iptalert-bench-run")
	}
	d, err := os.MkdirTemp("/dev/shm", "iptalert-bench-run")
	if err != nil {
		return "", err
	}
	// The real path: the hook and the agent open their memory with no
	// symlink on the way, and /dev/shm is one on some hosts.
	real, err := filepath.EvalSymlinks(d)
	if err != nil {
		os.RemoveAll(d)
		return "", err
	}
	return real, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// restore feeds a ruleset to iptables-nft-restore.
func restore(ruleset string) func(ns string) error {
	return func(ns string) error {
		if ruleset == "" {
			return nil
		}
		cmd := exec.Command("ip", "netns", "exec", ns, "iptables-nft-restore")
		cmd.Stdin = strings.NewReader(ruleset)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-nft-restore: %v: %s", err, out)
		}
		return nil
	}
}

func benchRuleset(bin, name string, setup func(ns string) error, runs int) error {
	ns := fmt.Sprintf("iptalert-bench-%s-%d", name, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	if err := setup(ns); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "iptalert-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	run, err := runDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	bundle := filepath.Join(tmp, "bundle")
	os.MkdirAll(bundle, 0o755)
	cfg := fmt.Sprintf(`{"ociVersion":"1.0.2","linux":{"namespaces":[{"type":"network","path":"/run/netns/%s"}]}}`, ns)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(cfg), 0o644); err != nil {
		return err
	}

	guard, err := shippedCommand(bin)
	if err != nil {
		return err
	}
	var hook, admin, guarded, hookCPU, adminCPU []time.Duration
	// The floor's mean, not its median: a thread's CPU is counted in
	// scheduler ticks, and a small netns's dump takes less than one.
	var floorSum time.Duration
	var maxRSS int64
	for i := 0; i < runs; i++ {
		// A new sandbox each run: the hook does its whole work, finding
		// and all, instead of stopping at "already recorded".
		state := func(sandbox string) *strings.Reader {
			b, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": fmt.Sprintf("c%d", i), "status": "running", "bundle": bundle,
				"annotations": map[string]string{"io.kubernetes.pod.namespace": "bench", "io.kubernetes.pod.name": "p", "io.kubernetes.pod.uid": "u",
					"io.kubernetes.container.name": "c", "io.kubernetes.cri-o.SandboxID": sandbox}})
			return strings.NewReader(string(b))
		}
		flags := []string{"--findings", filepath.Join(tmp, "findings.jsonl"), "--state-dir", filepath.Join(run, "state"), "--timeout", "30s"}
		cmd := exec.Command(bin, append([]string{"hook"}, flags...)...)
		cmd.Stdin = state(fmt.Sprintf("sb%d", i))
		d, err := timed(cmd)
		if err != nil {
			return fmt.Errorf("hook: %w", err)
		}
		hook, hookCPU = append(hook, d), append(hookCPU, cpu(cmd))
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > maxRSS {
			maxRSS = ru.Maxrss
		}
		cmd = guard(flags)
		cmd.Stdin = state(fmt.Sprintf("gsb%d", i))
		if d, err = timed(cmd); err != nil {
			return fmt.Errorf("hooks.d command: %w", err)
		}
		guarded = append(guarded, d)
		var total, totalCPU time.Duration
		for _, save := range []string{"iptables-nft-save", "ip6tables-nft-save"} {
			cmd := exec.Command("ip", "netns", "exec", ns, save)
			d, err := timed(cmd)
			if err != nil {
				return fmt.Errorf("%s: %w", save, err)
			}
			total, totalCPU = total+d, totalCPU+cpu(cmd)
		}
		admin, adminCPU = append(admin, total), append(adminCPU, totalCPU)
		f, err := dumpFloor([]string{ns})
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		floorSum += f
	}
	h, a, g, sc := median(hook), median(admin), median(guarded), float64(median(adminCPU))
	fmt.Printf("%-12s %12s %12s %6.2fx %9d KiB %12s %10s %9.2fx %9.3fx\n", name, h.Round(10*time.Microsecond), a.Round(10*time.Microsecond), float64(h)/float64(a), maxRSS,
		g.Round(10*time.Microsecond), (g - h).Round(10*time.Microsecond), float64(median(hookCPU))/sc, float64(floorSum)/float64(runs)/sc)
	return nil
}

// cpu is the CPU time, user and system, of a command that ran and of the
// children it reaped (wait4's rusage): the hook's probe or peek children,
// ip's exec of the save. Less moved by other load than wall time.
func cpu(cmd *exec.Cmd) time.Duration {
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// shippedCommand gives the command hooks.d/iptables-alerter.json runs, its
// binary path replaced by bin, taking the hook's flags after the JSON's own
// arguments as a runtime passes them, with the JSON's environment.
func shippedCommand(bin string) (func(flags []string) *exec.Cmd, error) {
	var j struct {
		Hook struct {
			Path string   `json:"path"`
			Args []string `json:"args"`
			Env  []string `json:"env"`
		} `json:"hook"`
	}
	if err := json.Unmarshal(hooksd.JSON, &j); err != nil {
		return nil, fmt.Errorf("hooks.d JSON: %w", err)
	}
	const shipped = "/usr/local/bin/iptables-alerter-hook"
	var args []string
	found := false
	for _, a := range j.Hook.Args {
		found = found || strings.Contains(a, shipped)
		args = append(args, strings.ReplaceAll(a, shipped, bin))
	}
	if !found || len(args) == 0 {
		return nil, fmt.Errorf("hooks.d JSON: no %s in its arguments", shipped)
	}
	return func(flags []string) *exec.Cmd {
		cmd := &exec.Cmd{Path: j.Hook.Path, Args: append(append([]string(nil), args...), flags...), Env: j.Hook.Env}
		return cmd
	}, nil
}

// benchStart runs 'bin version' runs times: the process start, package
// init and command dispatch every hook run pays before it reads anything.
func benchStart(bin string, runs int) error {
	var ds, cpus []time.Duration
	var faults []int64
	for i := 0; i < runs; i++ {
		cmd := exec.Command(bin, "version")
		d, err := timed(cmd)
		if err != nil {
			return fmt.Errorf("version: %w", err)
		}
		ds = append(ds, d)
		cpus = append(cpus, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			faults = append(faults, ru.Minflt)
		}
	}
	// No peak RSS here: a child's counts the bench's own pages from
	// before its exec, which dwarf a process this short.
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	fmt.Printf("start ('%s version', %d runs): median %s, p10 %s, p90 %s\n", filepath.Base(bin), runs,
		median(ds).Round(time.Microsecond), ds[len(ds)/10].Round(time.Microsecond), ds[len(ds)*9/10].Round(time.Microsecond))
	// A start's CPU is mostly its page faults: a VM whose faults cost
	// several times their usual shows here, and every figure made of
	// process starts (the saves, the hook, CRI-O) moves with it
	// (docs/performance.md, "What this VM's slow state is").
	if len(faults) > 0 {
		sort.Slice(faults, func(i, j int) bool { return faults[i] < faults[j] })
		f, cpu := faults[len(faults)/2], median(cpus)
		fmt.Printf("  its CPU: median %s; minor page faults: median %d; CPU / faults %s (on record, 2026-12-02: a start of 1.3 ms; a VM whose faults are slow shows here)\n",
			cpu.Round(time.Microsecond), f, (cpu / time.Duration(max(f, 1))).Round(100*time.Nanosecond))
	}
	fmt.Println()
	return nil
}

func timed(cmd *exec.Cmd) (time.Duration, error) {
	cmd.Stdout = nil
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return d, nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
