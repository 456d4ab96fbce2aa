package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// shippedUnit reads and parses a unit of packaging/systemd.
func shippedUnit(t *testing.T, name string) unit {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo(t), "packaging/systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	return parseUnit(t, data)
}

// flagDir is the directory an ExecStart flag names: the flag's value,
// or its parent when file is true.
func flagDir(t *testing.T, u unit, flag string, file bool) string {
	t.Helper()
	args := strings.Fields(u.last("Service", "ExecStart"))
	i := slices.Index(args, flag)
	if i < 0 || i+1 == len(args) {
		t.Fatalf("ExecStart %q: no %s", args, flag)
	}
	if file {
		return filepath.Dir(args[i+1])
	}
	return args[i+1]
}

// TestUnitsFreshNode: each unit starts on a node where nothing made its
// directories: systemd creates every directory the service writes
// (LogsDirectory=, RuntimeDirectory=, StateDirectory=), and a
// ReadWritePaths= entry of a directory another package owns is optional
// ('-'); systemd refuses to start a unit whose ReadWritePaths= is missing.
// The agent's runtime directory, the per-sandbox memory it shares with
// the hook, outlives a stop or restart of the agent.
func TestUnitsFreshNode(t *testing.T) {
	agent := shippedUnit(t, "iptables-alerter-agent.service")
	for _, c := range []struct{ flag, key, base string }{
		{"--findings", "LogsDirectory", "/var/log/"},
		{"--state-dir", "RuntimeDirectory", "/run/"},
	} {
		if got := c.base + agent.last("Service", c.key); got != flagDir(t, agent, c.flag, c.flag == "--findings") {
			t.Errorf("agent: %s=%q does not create the directory of %s", c.key, agent.last("Service", c.key), c.flag)
		}
	}
	if got := agent.last("Service", "RuntimeDirectoryPreserve"); got != "yes" {
		t.Errorf("agent: RuntimeDirectoryPreserve=%q: want yes (the hook's per-sandbox memory must outlive an agent restart)", got)
	}
	for _, name := range []string{"iptables-alerter-textfile.service", "iptables-alerter-textfile-once.service"} {
		u := shippedUnit(t, name)
		if got := "/var/lib/" + u.last("Service", "StateDirectory"); got != flagDir(t, u, "--checkpoint-dir", false) {
			t.Errorf("%s: StateDirectory=%q does not create --checkpoint-dir", name, u.last("Service", "StateDirectory"))
		}
	}
	units, _ := filepath.Glob(filepath.Join(repo(t), "packaging/systemd/*.service"))
	for _, path := range units {
		u := shippedUnit(t, filepath.Base(path))
		for _, p := range u.list("Service", "ReadWritePaths") {
			if !strings.HasPrefix(p, "-") {
				t.Errorf("%s: ReadWritePaths=%s: a directory nothing creates stops the unit from starting; a *Directory= or '-'", filepath.Base(path), p)
			}
		}
	}
}

// TestUnitsCapabilities: each service keeps exactly the capabilities it
// uses: the agent setns (SYS_ADMIN), netfilter dumps (NET_ADMIN), pid 1's
// netns (SYS_PTRACE) and its watch's real-time reader (SYS_NICE); the
// textfile consumers none.
func TestUnitsCapabilities(t *testing.T) {
	for name, want := range map[string][]string{
		"iptables-alerter-agent.service":         {"CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_NICE", "CAP_SYS_PTRACE"},
		"iptables-alerter-textfile.service":      nil,
		"iptables-alerter-textfile-once.service": nil,
	} {
		u := shippedUnit(t, name)
		if len(u["Service"]["CapabilityBoundingSet"]) != 1 {
			t.Errorf("%s: CapabilityBoundingSet= %q: want it set once", name, u["Service"]["CapabilityBoundingSet"])
		}
		got := u.list("Service", "CapabilityBoundingSet")
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: CapabilityBoundingSet=%v, want %v", name, got, want)
		}
		if u.last("Service", "AmbientCapabilities") != "" || u.last("Service", "User") != "" {
			t.Errorf("%s: runs as root with its bounding set only; User= or AmbientCapabilities= set", name)
		}
	}
}

// exposure is the score `systemd-analyze security --offline=yes` gives a
// unit file (0 safe .. 10 unsafe).
var exposure = regexp.MustCompile(`Overall exposure level for [^:]+: ([0-9.]+)`)

// TestUnitsAnalyze: systemd's own offline checks of the shipped units
// (no systemd runs as PID 1 here, so no unit is started): verify prints
// nothing, with ExecStart's program and the Documentation= man pages
// present as the package installs them; security scores the agent at 5.0
// or below (it keeps SYS_ADMIN, NET_ADMIN, SYS_PTRACE and SYS_NICE and sees the
// host's network and processes) and the textfile services, with no
// capability, lower.
func TestUnitsAnalyze(t *testing.T) {
	_, err := exec.LookPath("systemd-analyze")
	nstest.Need(t, err == nil, "needs systemd-analyze (apt-get install systemd)")
	_, err = exec.LookPath("man")
	nstest.Need(t, err == nil, "needs man, which verify runs for Documentation=man: (apt-get install man-db)")
	dir := t.TempDir()
	for _, d := range []string{"bin", "man/man8", "units"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"iptables-alerter", "iptables-alerter-agent"} {
		if err := os.WriteFile(filepath.Join(dir, "bin", b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(repo(t), "docs/man/*.8"))
	for _, p := range pages {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "man/man8", filepath.Base(p)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// As make install writes them, with the binary where this test put it.
	files, _ := filepath.Glob(filepath.Join(repo(t), "packaging/systemd/*"))
	var units []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data = []byte(strings.ReplaceAll(string(data), "/usr/local/bin/", dir+"/bin/"))
		u := filepath.Join(dir, "units", filepath.Base(f))
		if err := os.WriteFile(u, data, 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, u)
	}
	verify := exec.Command("systemd-analyze", append([]string{"verify"}, units...)...)
	verify.Env = append(os.Environ(), "MANPATH="+dir+"/man")
	if out, err := verify.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	score := func(name string) float64 {
		out, _ := exec.Command("systemd-analyze", "security", "--offline=yes", filepath.Join(dir, "units", name)).CombinedOutput()
		m := exposure.FindSubmatch(out)
		if m == nil {
			t.Fatalf("systemd-analyze security %s: no score\n%s", name, out)
		}
		f, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: exposure %.1f", name, f)
		return f
	}
	agent := score("iptables-alerter-agent.service")
	if agent > 5.0 {
		t.Errorf("agent: exposure %.1f, want 5.0 or below", agent)
	}
	for _, name := range []string{"iptables-alerter-textfile.service", "iptables-alerter-textfile-once.service"} {
		if s := score(name); s >= agent || s > 2.0 {
			t.Errorf("%s: exposure %.1f, want below the agent's %.1f and 2.0", name, s, agent)
		}
	}
}
