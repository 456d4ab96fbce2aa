package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

var (
	crioPairs   = flag.Int("crio-pairs", 200, "CRI-O: containers created and started with the hook and without it, each")
	crioTimed   = flag.Int("crio-timed", 100, "CRI-O: containers whose hook is timed, with the hooks.d command and with the binary alone, each")
	crioBlocks  = flag.Int("crio-agent-blocks", 10, "CRI-O agent-only mode: blocks of 10 containers with the agent connected and without it, each")
	crioBin     = flag.String("crio-bin", "../../bin/iptables-alerter", "CRI-O: full build `make install-files` installs")
	crioHookBin = flag.String("crio-hookbin", "../../bin/iptables-alerter-hook", "CRI-O: hook build the hooks.d JSON runs")
)

// TestMain removes the test image BenchmarkCRIOHook's pods run, which
// critest builds once per test binary outside any test's TempDir.
func TestMain(m *testing.M) {
	code := m.Run()
	critest.RemoveImage()
	os.Exit(code)
}

// BenchmarkCRIOHook measures what the hook adds to a container's start on a
// real CRI-O (tests/runtime/critest): CreateContainer plus StartContainer,
// what the kubelet waits for, with the shipped hooks.d JSON installed by
// `make install-files` into CRI-O's hooks_dir (critest.InstallHook).
//
// One CRI-O, one hooks_dir, read once: the pairs differ only in the
// annotation the JSON's `when` matches, io.kubernetes.container.hash, which
// every kubelet container has and the "without" containers lack, so CRI-O
// leaves the hook out of their spec (checked on each). Reloading hooks_dir
// between runs instead would race CRI-O's inotify reload. Each container
// gets a fresh pod (the hook does its whole work once per sandbox, as for
// a new pod) holding no rules, the common case; the pod's own setup is not
// timed. The order alternates within pairs so drift hits both alike. The
// added time is the median of the pairs' differences, with a bootstrap 95%
// interval.
//
// Two more entries of the same hooks_dir, matched by an annotation of the
// bench's own, time the hook as CRI-O's runtime runs it: bash's
// $EPOCHREALTIME around the shipped command (sh, timeout and the hook) or
// around the hook binary alone, with the same arguments, so the command's
// own wall time and what its guard adds are measured under CRI-O too.
//
//	make build && go test -run XXX -bench CRIOHook -benchtime 1x ./tests/bench
func BenchmarkCRIOHook(b *testing.B) {
	dir := b.TempDir()
	full, err1 := filepath.Abs(*crioBin)
	hook, err2 := filepath.Abs(*crioHookBin)
	if err1 != nil || err2 != nil {
		b.Fatal(err1, err2)
	}
	// The hook's files go to the bench's dirs, never the host's.
	args := []string{"--findings", filepath.Join(dir, "findings.jsonl"),
		"--state-dir", runDirFor(b), "--allowlist", "", "--node", "bench-node",
		"--log-level", "debug", "--log-file", filepath.Join(dir, "hook.log")}
	installed, hooksDir := critest.InstallHook(b, full, hook, args...)
	timing := filepath.Join(dir, "timing")
	writeTimedHooks(b, hooksDir, installed, args, timing)
	c := critest.StartCRIO(b, hooksDir)
	fmt.Printf("\nCRI-O (%s), CreateContainer+StartContainer, %d pairs, load %s\n", c.Version(), *crioPairs, loadavg())

	var hooked []string
	run := func(name, kind string) time.Duration {
		p := c.RunPod(name, false)
		cfg := critest.ContainerConfig(p, "app", "trap 'exit 0' TERM; while :; do sleep 1; done")
		if kind != "shipped" {
			delete(cfg.Annotations, "io.kubernetes.container.hash")
		}
		if kind == "command" || kind == "binary" {
			cfg.Annotations[timedKey] = kind
		}
		began := time.Now()
		id := c.CreateContainerConfig(p, cfg)
		c.StartContainer(id)
		took := time.Since(began)
		if got, want := hasPoststart(b, c.ContainerSpec(id)), kind != "none"; got != want {
			b.Fatalf("container %s: poststart hook in spec %t, want %t", name, got, want)
		}
		if kind != "none" {
			hooked = append(hooked, id)
		}
		c.StopPod(p)
		c.RemovePod(p)
		return took
	}
	run("warm-up", "shipped") // CRI-O's and the page cache's first use
	var with, without, diff []time.Duration
	for i := 0; i < *crioPairs; i++ {
		var w, wo time.Duration
		if i%2 == 0 {
			w, wo = run(fmt.Sprintf("bench-%d-with", i), "shipped"), run(fmt.Sprintf("bench-%d-without", i), "none")
		} else {
			wo, w = run(fmt.Sprintf("bench-%d-without", i), "none"), run(fmt.Sprintf("bench-%d-with", i), "shipped")
		}
		with, without, diff = append(with, w), append(without, wo), append(diff, w-wo)
	}
	os.Remove(timing) // the warm-up's, if any
	for i := 0; i < *crioTimed; i++ {
		kinds := []string{"command", "binary"}
		if i%2 == 1 {
			kinds[0], kinds[1] = kinds[1], kinds[0]
		}
		for _, k := range kinds {
			run(fmt.Sprintf("timed-%d-%s", i, k), k)
		}
	}
	// The hook ran for each container it was in (it logs each it scans).
	log, _ := os.ReadFile(filepath.Join(dir, "hook.log"))
	for _, id := range hooked {
		if !strings.Contains(string(log), id) {
			b.Fatalf("no hook log line for container %s:\n%s", id, log)
		}
	}
	fmt.Printf("  %-22s %10s %10s\n", "", "p50", "p90")
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"with the hook", with}, {"without", without}, {"added (per pair)", diff}} {
		fmt.Printf("  %-22s %10s %10s\n", r.name, quantile(r.ds, 0.5).Round(100*time.Microsecond), quantile(r.ds, 0.9).Round(100*time.Microsecond))
	}
	lo, hi := bootstrap(func(s ...[]time.Duration) time.Duration { return quantile(s[0], 0.5) }, diff)
	fmt.Printf("  added per pair: median %s, bootstrap 95%% interval %s .. %s; p10 %s .. p90 %s; ratio of p50s %.3fx\n",
		quantile(diff, 0.5).Round(100*time.Microsecond), lo.Round(100*time.Microsecond), hi.Round(100*time.Microsecond),
		quantile(diff, 0.1).Round(100*time.Microsecond), quantile(diff, 0.9).Round(100*time.Microsecond),
		float64(quantile(with, 0.5))/float64(quantile(without, 0.5)))
	if *crioTimed > 0 {
		printTimed(b, timing, *crioTimed)
	}
}

// timedKey is the annotation the bench's timed hooks.d entries match.
const timedKey = "iptables-alerter.bench/timed"

// writeTimedHooks adds two entries to hooksDir beside the shipped one, each
// matching timedKey's value alone: "command" runs the installed command
// (the shipped JSON's, args included), "binary" the hook binary with the
// same arguments the command gives it. Each is wrapped in bash, whose
// $EPOCHREALTIME (no process) before and after goes to timing, one line a
// run: the wall time of what the runtime would otherwise have run, minus
// bash's own start. Both discard the output, as the command does.
func writeTimedHooks(b *testing.B, hooksDir, hookBin string, args []string, timing string) {
	data, err := os.ReadFile(filepath.Join(hooksDir, "iptables-alerter.json"))
	if err != nil {
		b.Fatal(err)
	}
	var shipped struct {
		Hook specs.Hook `json:"hook"`
	}
	if err := json.Unmarshal(data, &shipped); err != nil {
		b.Fatal(err)
	}
	for kind, argv := range map[string][]string{
		"command": append([]string{shipped.Hook.Path}, shipped.Hook.Args[1:]...),
		"binary":  append([]string{hookBin, "hook", "--stage", "poststart"}, args...),
	} {
		script := `t0=$EPOCHREALTIME; "$0" "$@" >/dev/null 2>&1; t1=$EPOCHREALTIME; echo "` + kind + ` $t0 $t1" >> ` + timing + `; exit 0`
		timeout := 10
		entry := map[string]any{
			"version": "1.0.0",
			"hook":    specs.Hook{Path: "/bin/bash", Args: append([]string{"bash", "-c", script}, argv...), Env: shipped.Hook.Env, Timeout: &timeout},
			"when":    map[string]any{"annotations": map[string]string{"^" + strings.ReplaceAll(timedKey, ".", `\.`) + "$": "^" + kind + "$"}},
			"stages":  []string{"poststart"},
		}
		out, err := json.Marshal(entry)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hooksDir, "bench-timed-"+kind+".json"), out, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// printTimed reads the timed runs' lines and prints each kind's median wall
// time and the command's excess over the binary alone.
func printTimed(b *testing.B, timing string, runs int) {
	data, err := os.ReadFile(timing)
	if err != nil {
		b.Fatal(err)
	}
	took := map[string][]time.Duration{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			b.Fatalf("timing line %q", l)
		}
		t0, t1 := epochMicros(b, f[1]), epochMicros(b, f[2])
		took[f[0]] = append(took[f[0]], time.Duration(t1-t0)*time.Microsecond)
	}
	cmd, bin := took["command"], took["binary"]
	if len(cmd) != runs || len(bin) != runs {
		b.Fatalf("%d command and %d binary timings, want %d each", len(cmd), len(bin), runs)
	}
	fmt.Printf("  hook as CRI-O's runtime runs it, %d runs each, alternated (wall, bash's $EPOCHREALTIME around it):\n", runs)
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"hooks.d command", cmd}, {"hook binary alone", bin}} {
		lo, hi := bootstrap(func(s ...[]time.Duration) time.Duration { return quantile(s[0], 0.5) }, r.ds)
		fmt.Printf("  %-22s median %s (95%% %s .. %s), p90 %s\n", r.name, quantile(r.ds, 0.5).Round(10*time.Microsecond),
			lo.Round(10*time.Microsecond), hi.Round(10*time.Microsecond), quantile(r.ds, 0.9).Round(10*time.Microsecond))
	}
	lo, hi := bootstrap(func(s ...[]time.Duration) time.Duration { return quantile(s[0], 0.5) - quantile(s[1], 0.5) }, cmd, bin)
	fmt.Printf("  %-22s %s (95%% %s .. %s)\n", "guard adds (medians)", (quantile(cmd, 0.5) - quantile(bin, 0.5)).Round(10*time.Microsecond),
		lo.Round(10*time.Microsecond), hi.Round(10*time.Microsecond))
}

// epochMicros parses bash's $EPOCHREALTIME (seconds.microseconds) exactly.
func epochMicros(b *testing.B, s string) int64 {
	sec, usec, ok := strings.Cut(s, ".")
	n1, err1 := strconv.ParseInt(sec, 10, 64)
	n2, err2 := strconv.ParseInt(usec, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(usec) != 6 {
		b.Fatalf("EPOCHREALTIME %q", s)
	}
	return n1*1e6 + n2
}

// bootstrap is the 95% interval of stat over 10,000 resamples (with
// replacement, each group on its own) of groups; the seed is fixed so a
// run's printout can be reproduced from its data.
func bootstrap(stat func(...[]time.Duration) time.Duration, groups ...[]time.Duration) (lo, hi time.Duration) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 10000
	stats := make([]time.Duration, n)
	re := make([][]time.Duration, len(groups))
	for i := range stats {
		for g, ds := range groups {
			re[g] = re[g][:0]
			for range ds {
				re[g] = append(re[g], ds[r.IntN(len(ds))])
			}
		}
		stats[i] = stat(re...)
	}
	return quantile(stats, 0.025), quantile(stats, 0.975)
}

// hasPoststart tells whether CRI-O put a poststart hook into the spec.
func hasPoststart(b *testing.B, spec []byte) bool {
	var s specs.Spec
	if err := json.Unmarshal(spec, &s); err != nil {
		b.Fatal(err)
	}
	return s.Hooks != nil && len(s.Hooks.Poststart) > 0 && strings.Contains(strings.Join(s.Hooks.Poststart[0].Args, " "), "iptables-alerter-hook")
}

// quantile is the nearest-rank quantile q of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// BenchmarkCRIOAgent measures the agent-only mode on a real CRI-O: no
// hooks.d entry, the agent (the full build) connected to CRI-O's NRI
// socket. Blocks of 10 containers with the agent running and without it
// alternate (the agent is started and stopped between blocks, and waited
// for until CRI-O has synchronised it); each container gets a fresh pod
// holding no rules, timed as BenchmarkCRIOHook times it. It prints what the
// agent adds to CreateContainer plus StartContainer (the difference of the
// medians, with a bootstrap 95% interval) and the agent's own CPU per
// container over its blocks (its scans run after the runtime's calls
// returned, on the node's cores).
//
//	make build && go test -run XXX -bench CRIOAgent -benchtime 1x ./tests/bench
func BenchmarkCRIOAgent(b *testing.B) {
	dir := b.TempDir()
	full, err := filepath.Abs(*crioBin)
	if err != nil {
		b.Fatal(err)
	}
	c := critest.StartCRIO(b, "")
	fmt.Printf("\nCRI-O (%s) agent-only mode (NRI, no hook), CreateContainer+StartContainer, %d blocks of 10 each way, load %s\n",
		c.Version(), *crioBlocks, loadavg())
	run := func(name string) time.Duration {
		p := c.RunPod(name, false)
		began := time.Now()
		id := c.CreateContainer(p, "app", "trap 'exit 0' TERM; while :; do sleep 1; done")
		c.StartContainer(id)
		took := time.Since(began)
		c.StopPod(p)
		c.RemovePod(p)
		return took
	}
	run("warm-up")
	var on, off []time.Duration
	var cpu time.Duration
	for blk := 0; blk < *crioBlocks; blk++ {
		for _, withAgent := range []bool{blk%2 == 0, blk%2 != 0} {
			if !withAgent {
				for i := 0; i < 10; i++ {
					off = append(off, run(fmt.Sprintf("agent-%d-off-%d", blk, i)))
				}
				continue
			}
			a := startBenchAgent(b, full, c.NRISocket, filepath.Join(dir, fmt.Sprint(blk)))
			for i := 0; i < 10; i++ {
				on = append(on, run(fmt.Sprintf("agent-%d-on-%d", blk, i)))
			}
			cpu += a.stop(b)
		}
	}
	lo, hi := bootstrap(func(s ...[]time.Duration) time.Duration { return quantile(s[0], 0.5) - quantile(s[1], 0.5) }, on, off)
	fmt.Printf("  %-22s %10s %10s\n", "", "p50", "p90")
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"agent connected", on}, {"no agent", off}} {
		fmt.Printf("  %-22s %10s %10s\n", r.name, quantile(r.ds, 0.5).Round(100*time.Microsecond), quantile(r.ds, 0.9).Round(100*time.Microsecond))
	}
	fmt.Printf("  agent adds (medians) %s, bootstrap 95%% interval %s .. %s; agent CPU %s per container (its start and sync included)\n",
		(quantile(on, 0.5) - quantile(off, 0.5)).Round(100*time.Microsecond), lo.Round(100*time.Microsecond), hi.Round(100*time.Microsecond),
		(cpu / time.Duration(len(on))).Round(100*time.Microsecond))
}

// benchAgent is an agent the bench started.
type benchAgent struct {
	cmd     *exec.Cmd
	out     *nstest.Buffer
	done    chan error
	stopped bool
}

// runDirFor is runDir, removed when b ends.
func runDirFor(b *testing.B) string {
	d, err := runDir()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// startBenchAgent runs the agent on socket with its files under dir, with
// the defaults an admin gets, and waits until CRI-O has synchronised it.
func startBenchAgent(b *testing.B, bin, socket, dir string) *benchAgent {
	addr := nstest.FreeAddr(b)
	var log strings.Builder
	a := &benchAgent{done: make(chan error, 1), out: new(nstest.Buffer)}
	// The findings file's directory: with the memory elsewhere nothing
	// else makes it, and the swept file's write after each sweep (as an
	// admin's agent does it) needs it.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	// --host-proc "": this machine's pid 1 (the VM's init) keeps its
	// namespaces from root, and the node's netns only tells host-network
	// pods apart, which the bench has none of.
	a.cmd = exec.Command(bin, "agent", "--nri-socket", socket, "--findings", filepath.Join(dir, "findings.jsonl"),
		"--state-dir", runDirFor(b), "--allowlist", "", "--health-addr", addr, "--node", "bench-node", "--host-proc", "")
	a.cmd.Stdout, a.cmd.Stderr = io.Discard, a.out
	if err := a.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	b.Cleanup(func() { a.stop(b) })
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			log.Reset()
			log.Write(body)
			if strings.Contains(log.String(), "\niptables_alerter_agent_connected 1") &&
				!strings.Contains(log.String(), "\niptables_alerter_agent_last_sync_timestamp_seconds 0\n") {
				return a
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("agent not synchronised by CRI-O within 60 s; metrics:\n%s\nits log:\n%s", log.String(), a.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the agent (SIGTERM, then SIGKILL after 20 s) and returns the
// CPU it used.
func (a *benchAgent) stop(b *testing.B) time.Duration {
	if a.stopped {
		return 0
	}
	a.stopped = true
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		b.Error("agent did not stop on SIGTERM")
	}
	return a.cmd.ProcessState.UserTime() + a.cmd.ProcessState.SystemTime()
}
