package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

var (
	crioPairs   = flag.Int("crio-pairs", 25, "CRI-O: containers created and started with the hook and without it, each")
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
// timed. The order alternates within pairs so drift hits both alike.
//
//	make build && go test -run XXX -bench CRIOHook -benchtime 1x ./tests/bench
func BenchmarkCRIOHook(b *testing.B) {
	dir := b.TempDir()
	full, err1 := filepath.Abs(*crioBin)
	hook, err2 := filepath.Abs(*crioHookBin)
	if err1 != nil || err2 != nil {
		b.Fatal(err1, err2)
	}
	// The hook's files go to the bench's dir, never the host's.
	_, hooksDir := critest.InstallHook(b, full, hook, "--findings", filepath.Join(dir, "findings.jsonl"),
		"--state-dir", filepath.Join(dir, "state"), "--allowlist", "", "--node", "bench-node",
		"--log-level", "debug", "--log-file", filepath.Join(dir, "hook.log"))
	c := critest.StartCRIO(b, hooksDir)
	fmt.Printf("\nCRI-O (%s), CreateContainer+StartContainer, %d pairs, load %s\n", c.Version(), *crioPairs, loadavg())

	var hooked []string
	run := func(i int, withHook bool) time.Duration {
		name := fmt.Sprintf("bench-%d-%t", i, withHook)
		p := c.RunPod(name, false)
		cfg := critest.ContainerConfig(p, "app", "trap 'exit 0' TERM; while :; do sleep 1; done")
		if !withHook {
			delete(cfg.Annotations, "io.kubernetes.container.hash")
		}
		began := time.Now()
		id := c.CreateContainerConfig(p, cfg)
		c.StartContainer(id)
		took := time.Since(began)
		if got := hasPoststart(b, c.ContainerSpec(id)); got != withHook {
			b.Fatalf("container %s: poststart hook in spec %t, want %t", name, got, withHook)
		}
		if withHook {
			hooked = append(hooked, id)
		}
		c.StopPod(p)
		c.RemovePod(p)
		return took
	}
	run(-1, true) // warm-up: CRI-O's and the page cache's first use
	var with, without, diff []time.Duration
	for i := 0; i < *crioPairs; i++ {
		var w, wo time.Duration
		if i%2 == 0 {
			w, wo = run(i, true), run(i, false)
		} else {
			wo, w = run(i, false), run(i, true)
		}
		with, without, diff = append(with, w), append(without, wo), append(diff, w-wo)
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
	fmt.Printf("  ratio of p50s %.2fx; added per pair p10 %s .. p90 %s\n",
		float64(quantile(with, 0.5))/float64(quantile(without, 0.5)),
		quantile(diff, 0.1).Round(100*time.Microsecond), quantile(diff, 0.9).Round(100*time.Microsecond))
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
