package execwatch

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
)

func TestToolOf(t *testing.T) {
	for exe, want := range map[string]string{
		"/usr/sbin/xtables-nft-multi":             BackendNft,
		"/usr/sbin/xtables-legacy-multi":          BackendLegacy,
		"/sbin/xtables-multi":                     BackendLegacy,
		"/usr/sbin/ebtables-legacy":               BackendLegacy,
		"/usr/sbin/iptables":                      BackendLegacy,
		"/usr/sbin/xtables-nft-multi (deleted)":   BackendNft,
		"/usr/bin/bash":                           "",
		"/usr/sbin/iptables-wrapper-installer.sh": "",
		// kubernetes-sigs/iptables-wrappers' Go binary runs the real tool
		// as its child: that one is the tool. (Failed before toolOf set
		// wrappers aside: legacy.)
		"/usr/sbin/iptables-wrapper": "",
		"/usr/sbin/iptables-legacy":  BackendLegacy,
		"/usr/bin/true":              "",
		// Every suffix and combination the tools come with.
		"/usr/sbin/iptables-legacy-save":            BackendLegacy,
		"/usr/sbin/ip6tables-nft-restore":           BackendNft,
		"/usr/sbin/iptables-restore-translate":      BackendLegacy,
		"/usr/sbin/ip6tables-nft-restore-translate": BackendNft,
		"/usr/sbin/arptables-nft":                   BackendNft,
		"/usr/sbin/ebtables-translate":              BackendLegacy,
		"/usr/sbin/ip6tables-save":                  BackendLegacy,
		"/sbin/iptables-multi":                      BackendLegacy,
		// Named like a tool, none: an exporter (its argv may hold
		// secrets, and a daemon holds a pending slot for its life).
		"/usr/bin/iptables_exporter":        "",
		"/usr/local/bin/iptables-exporter":  "",
		"/usr/sbin/ebtablesd":               "",
		"/usr/sbin/iptables-nft-exporter":   "",
		"/usr/sbin/iptables-legacy-nft":     "",
		"/usr/sbin/iptables-save-restore":   "",
		"/usr/sbin/ip6tables-legacy-legacy": "",
	} {
		got, ok := toolOf(exe)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", exe, got, ok, want)
		}
	}
	for comm, want := range map[string]bool{"iptables": true, "iptables-wrappe": true, "xtables-legacy-": true, "ip6tables-resto": true,
		"ebtables": true, "arptables-nft": true, "true": false, "ip": false, "nft": false, "kube-proxy": false} {
		if commCandidate(comm) != want {
			t.Errorf("comm %q: %v", comm, !want)
		}
	}
}

func TestParseArgv(t *testing.T) {
	for _, tc := range []struct {
		argv  []string
		want  Shape
		write bool
		ans   bool
	}{
		{[]string{"iptables-legacy", "-t", "nat", "-A", "OUTPUT", "-j", "ACCEPT"},
			Shape{Tool: "iptables-legacy", Family: "iptables", Operation: OpWrite, Command: "-A", Table: "nat", Chain: "OUTPUT"}, true, false},
		{[]string{"/sbin/iptables", "-w", "5", "-C", "KUBE-SERVICES", "-m", "comment", "--comment", "x", "-j", "RETURN"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpRead, Command: "-C", Table: "filter", Chain: "KUBE-SERVICES"}, false, true},
		{[]string{"ip6tables", "-tmangle", "-nvL"},
			Shape{Tool: "ip6tables", Family: "ip6tables", Operation: OpRead, Command: "-L", Table: "mangle"}, false, false},
		{[]string{"iptables", "-nL", "INPUT", "--line-numbers"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpRead, Command: "-L", Table: "filter", Chain: "INPUT"}, false, false},
		{[]string{"iptables-nft", "--table=raw", "--delete", "PREROUTING", "1"},
			Shape{Tool: "iptables-nft", Family: "iptables", Operation: OpWrite, Command: "--delete", Table: "raw", Chain: "PREROUTING"}, true, true},
		{[]string{"iptables", "-P", "FORWARD", "DROP"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpWrite, Command: "-P", Table: "filter", Chain: "FORWARD"}, true, false},
		{[]string{"iptables-legacy-save", "-t", "nat"},
			Shape{Tool: "iptables-legacy-save", Family: "iptables", Operation: OpSave, Table: "nat"}, false, false},
		{[]string{"iptables-restore", "--noflush", "-w"},
			Shape{Tool: "iptables-restore", Family: "iptables", Operation: OpRestore}, true, false},
		{[]string{"iptables-nft-restore", "-t"},
			Shape{Tool: "iptables-nft-restore", Family: "iptables", Operation: OpRestore, Test: true}, false, false},
		// A command's letter takes the rest of its word as its chain.
		{[]string{"iptables", "-LINPUT"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpRead, Command: "-L", Table: "filter", Chain: "INPUT"}, false, false},
		{[]string{"iptables", "-CINPUT", "-j", "ACCEPT"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpRead, Command: "-C", Table: "filter", Chain: "INPUT"}, false, true},
		{[]string{"iptables", "-Atest", "-j", "ACCEPT"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpWrite, Command: "-A", Table: "filter", Chain: "test"}, true, false},
		// An extension's exact option is not the command it abbreviates.
		{[]string{"iptables", "-C", "FORWARD", "-m", "policy", "--dir", "in", "--pol", "ipsec", "-j", "ACCEPT"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpRead, Command: "-C", Table: "filter", Chain: "FORWARD"}, false, true},
		{[]string{"iptables", "-C", "FORWARD", "-mpolicy", "--pol", "ipsec", "-j", "ACCEPT"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpRead, Command: "-C", Table: "filter", Chain: "FORWARD"}, false, true},
		{[]string{"iptables", "--pol", "FORWARD", "DROP"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpWrite, Command: "--policy", Table: "filter", Chain: "FORWARD"}, true, false},
		// translate prints nftables syntax: no write.
		{[]string{"iptables-translate", "-A", "INPUT", "-j", "ACCEPT"},
			Shape{Tool: "iptables-translate", Family: "iptables", Operation: OpRead}, false, false},
		// The multi binaries' short applet names; a path is no applet.
		{[]string{"xtables-legacy-multi", "restore4", "--noflush"},
			Shape{Tool: "iptables-restore", Family: "iptables", Operation: OpRestore}, true, false},
		{[]string{"xtables-nft-multi", "main6", "-t", "nat", "-A", "OUTPUT", "-j", "ACCEPT"},
			Shape{Tool: "ip6tables", Family: "ip6tables", Operation: OpWrite, Command: "-A", Table: "nat", Chain: "OUTPUT"}, true, false},
		// A restore's -w takes no argument in its word.
		{[]string{"iptables-restore", "-wt"},
			Shape{Tool: "iptables-restore", Family: "iptables", Operation: OpRestore, Test: true}, false, false},
		{[]string{"iptables-restore", "-w", "5", "--noflush"},
			Shape{Tool: "iptables-restore", Family: "iptables", Operation: OpRestore}, true, false},
		{[]string{"ebtables-nft", "-R", "FORWARD", "1", "-j", "ACCEPT"},
			Shape{Tool: "ebtables-nft", Family: "ebtables", Operation: OpWrite, Command: "-R", Table: "filter", Chain: "FORWARD"}, true, false},
		{[]string{"iptables-legacy-restore", "-T", "nat", "--noflush"},
			Shape{Tool: "iptables-legacy-restore", Family: "iptables", Operation: OpRestore, Table: "nat"}, true, false},
		{[]string{"ip6tables-restore", "-Tmangle"},
			Shape{Tool: "ip6tables-restore", Family: "ip6tables", Operation: OpRestore, Table: "mangle"}, true, false},
		// Another applet of xtables-nft-multi takes options after its
		// name: "--trace" is no applet.
		{[]string{"xtables-monitor", "--trace"},
			Shape{Tool: "xtables-monitor", Operation: OpRead, Table: "filter"}, false, false},
		{[]string{"/usr/sbin/xtables-nft-multi", "iptables-restore", "--noflush"},
			Shape{Tool: "iptables-restore", Family: "iptables", Operation: OpRestore}, true, false},
		{[]string{"xtables-legacy-multi", "iptables", "-F"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpWrite, Command: "-F", Table: "filter"}, true, true},
		{[]string{"ebtables", "-t", "broute", "-L"},
			Shape{Tool: "ebtables", Family: "ebtables", Operation: OpRead, Command: "-L", Table: "broute"}, false, false},
		// ebtables' -C changes a rule's counters (a write, its exit 1 a
		// failure); --init-table empties the table; --check is long only.
		{[]string{"ebtables-nft", "-C", "INPUT", "1", "5", "6"},
			Shape{Tool: "ebtables-nft", Family: "ebtables", Operation: OpWrite, Command: "-C", Table: "filter", Chain: "INPUT"}, true, false},
		{[]string{"ebtables", "--change-counters", "FORWARD", "1", "0", "0"},
			Shape{Tool: "ebtables", Family: "ebtables", Operation: OpWrite, Command: "--change-counters", Table: "filter", Chain: "FORWARD"}, true, false},
		{[]string{"ebtables-nft", "-t", "nat", "--init"},
			Shape{Tool: "ebtables-nft", Family: "ebtables", Operation: OpWrite, Command: "--init-table", Table: "nat"}, true, false},
		{[]string{"ebtables-legacy", "--atomic-file", "/tmp/t", "--atomic-commit"},
			Shape{Tool: "ebtables-legacy", Family: "ebtables", Operation: OpWrite, Command: "--atomic-commit", Table: "filter"}, true, false},
		{[]string{"ebtables-nft", "--check", "INPUT", "-j", "ACCEPT"},
			Shape{Tool: "ebtables-nft", Family: "ebtables", Operation: OpRead, Command: "--check", Table: "filter", Chain: "INPUT"}, false, true},
		{[]string{"ebtables-nft", "-L", "--Lc"},
			Shape{Tool: "ebtables-nft", Family: "ebtables", Operation: OpRead, Command: "-L", Table: "filter"}, false, false},
		{[]string{"iptables", "--version"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpRead, Table: "filter"}, false, false},
		{[]string{"iptables", "-A", "-X"}, // a chain named like an option is no chain
			Shape{Tool: "iptables", Family: "iptables", Operation: OpWrite, Command: "-A", Table: "filter"}, true, false},
		{nil, Shape{}, false, false},
	} {
		got := ParseArgv(tc.argv)
		if got != tc.want || got.Write() != tc.write || got.Answers() != tc.ans {
			t.Errorf("%q:\n got %+v (write %v, answers %v)\nwant %+v", tc.argv, got, got.Write(), got.Answers(), tc.want)
		}
	}
}

// BenchmarkDecide compares the two cheap first tests an exec could get:
// reading /proc/PID/comm (open, read, read, close: readable for any
// process) and the /proc/PID/exe link (one readlinkat; needs ptrace
// access, which the agent has). Here on 2 shared cores: comm 25-88 µs,
// exe 5-25 µs; the watch reads exe, and comm only without access.
func BenchmarkDecide(b *testing.B) {
	pid := os.Getpid()
	b.Run("comm", func(b *testing.B) {
		for range b.N {
			c, err := comm("/proc", pid)
			if err != nil || commCandidate(c) {
				b.Fatal(c, err)
			}
		}
	})
	b.Run("exe", func(b *testing.B) {
		p := "/proc/" + strconv.Itoa(pid) + "/exe"
		for range b.N {
			if _, err := readlink(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestParseArgvAbbreviated: the tools read their options with
// getopt_long, which takes any unambiguous prefix of a long option and an
// option's argument whatever it starts with. Each command line below was
// run with iptables-legacy and iptables-nft 1.8.9 in a test netns: each
// exited 0 and wrote its rule (the restore only checked its input).
func TestParseArgvAbbreviated(t *testing.T) {
	for _, tc := range []struct {
		argv  []string
		want  Shape
		write bool
	}{
		{[]string{"iptables-legacy", "--app", "INPUT", "-j", "ACCEPT"},
			Shape{Tool: "iptables-legacy", Family: "iptables", Operation: OpWrite, Command: "--append", Table: "filter", Chain: "INPUT"}, true},
		{[]string{"iptables-nft", "--ins", "INPUT", "-j", "ACCEPT"},
			Shape{Tool: "iptables-nft", Family: "iptables", Operation: OpWrite, Command: "--insert", Table: "filter", Chain: "INPUT"}, true},
		{[]string{"iptables-legacy", "--tab", "nat", "--app", "OUTPUT", "-j", "ACCEPT"},
			Shape{Tool: "iptables-legacy", Family: "iptables", Operation: OpWrite, Command: "--append", Table: "nat", Chain: "OUTPUT"}, true},
		{[]string{"iptables-nft", "--app=INPUT", "-j", "ACCEPT"},
			Shape{Tool: "iptables-nft", Family: "iptables", Operation: OpWrite, Command: "--append", Table: "filter", Chain: "INPUT"}, true},
		// --comment takes "-L" as its argument: the command is -A.
		{[]string{"iptables-legacy", "-m", "comment", "--comment", "-L", "-A", "INPUT", "-j", "DROP"},
			Shape{Tool: "iptables-legacy", Family: "iptables", Operation: OpWrite, Command: "-A", Table: "filter", Chain: "INPUT"}, true},
		{[]string{"iptables-legacy-restore", "--tes"},
			Shape{Tool: "iptables-legacy-restore", Family: "iptables", Operation: OpRestore, Test: true}, false},
		// Ambiguous (--delete, --delete-chain, --destination): the tool
		// refuses it, as it refuses --lis (--list, --list-rules).
		{[]string{"iptables", "--de", "INPUT"},
			Shape{Tool: "iptables", Family: "iptables", Operation: OpRead, Table: "filter"}, false},
	} {
		got := ParseArgv(tc.argv)
		if got != tc.want || got.Write() != tc.write {
			t.Errorf("%q:\n got %+v (write %v)\nwant %+v", tc.argv, got, got.Write(), tc.want)
		}
	}
}

// lacksNetAdmin reads CapEff; unknown (absent, cut, unparsable) is
// never taken for a lack.
func TestLacksNetAdmin(t *testing.T) {
	for status, want := range map[string]bool{
		"Name:\tx\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nCapBnd:\t0\n": false,
		"Name:\tx\nCapEff:\t00000000a80425fb\nCapBnd:\t0\n":                            true, // a container's default set
		"Name:\tx\nCapEff:\t0000000000001000\n":                                        false,
		"Name:\tx\nCapEff:\t0000000000000000\n":                                        true,
		"Name:\tx\nCapEff:\t00000000":                                                  false, // cut
		"Name:\tx\nGroups:\t1 2 3":                                                     false,
		"Name:\tx\nCapEff:\tzz\n":                                                      false,
		"":                                                                             false,
	} {
		if got := lacksNetAdmin([]byte(status)); got != want {
			t.Errorf("%q: %v, want %v", status, got, want)
		}
	}
}

// TestParseArgvCut: a command line whose arguments past MaxArgs were left
// out, and whose part read names no write, is taken for a write: the -A
// may be among those left out, and "-L" read may be --comment's text
// (helper-107 #2). A save stays a save, and a line not cut is read as it
// says.
func TestParseArgvCut(t *testing.T) {
	long := []string{"iptables-legacy", "-m", "comment", "--comment", "-L"}
	for range 35 {
		long = append(long, "-m", "comment")
	}
	long = append(long, "-A", "INPUT")
	read := long[:MaxArgs]
	if s := ParseArgvCut(read, true); s.Operation != OpWrite || !s.Write() || s.Command != "" || !s.Guessed {
		t.Errorf("left out after --comment -L: %+v, want a write of no command read", s)
	}
	if s := ParseArgvCut(read, false); s.Operation != OpRead {
		t.Errorf("whole: %+v, want the read it says", s)
	}
	if s := ParseArgvCut(append([]string{"iptables-legacy"}, read[5:]...), true); s.Operation != OpWrite {
		t.Errorf("left out, no command read: %+v, want a write", s)
	}
	if s := ParseArgvCut([]string{"iptables-legacy", "-A", "INPUT", "-m", "comment"}, true); s.Operation != OpWrite || s.Command != "-A" || s.Guessed {
		t.Errorf("left out after -A: %+v, want its write", s)
	}
	if s := ParseArgvCut([]string{"iptables-legacy-save", "-t"}, true); s.Operation != OpSave {
		t.Errorf("left out of a save: %+v, want a save", s)
	}
}

// TestCmdlineCut: a cluster of short options shortened past MaxArg may
// have lost its command letter (-vvv...A: iptables takes repeated -v), so
// arguments count as left out (helper-108 #2); a long option's value
// shortened, or a whole line, does not.
func TestCmdlineCut(t *testing.T) {
	line := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	for _, tc := range []struct {
		b    []byte
		want argvCut
	}{
		{line("iptables-legacy", "-"+strings.Repeat("v", 300)+"A", "INPUT", "-j", "ACCEPT"), argShortened | argsLeftOut},
		{line("iptables-legacy", "-C", "INPUT", "-m", "comment", "--comment", strings.Repeat("x", 300)), argShortened},
		{line("iptables-legacy", "--comment="+strings.Repeat("x", 300)), argShortened},
		{line("iptables-legacy", "-A", "INPUT"), 0},
	} {
		_, cut, err := parseCmdline(tc.b)
		if err != nil || cut != tc.want {
			t.Errorf("%.40q: cut %b (%v), want %b", tc.b, cut, err, tc.want)
		}
	}
}

// TestParseRun: a multi binary dispatches on argv[0]'s name when it is
// one of its own applets, else on argv[1]; the watch reads a run so. A
// name another backend's binary has (iptables-legacy before
// xtables-nft-multi) is none of its applets; an argv[0] cut short may
// have lost the name that chose, and stays.
func TestParseRun(t *testing.T) {
	const legacy, nft = "/usr/sbin/xtables-legacy-multi", "/usr/sbin/xtables-nft-multi"
	long := safetext.Cut("/"+strings.Repeat("d", 300)+"/iptables", MaxArg)
	for _, tc := range []struct {
		exe  string
		argv []string
		tool string
		op   string
	}{
		{legacy, []string{"ipt", "iptables-restore", "--noflush", "f"}, "iptables-restore", OpRestore},
		{legacy, []string{"iptables", "-A", "INPUT", "-j", "DROP"}, "iptables", OpWrite},
		{legacy, []string{"/usr/sbin/iptables-legacy-save"}, "iptables-legacy-save", OpSave},
		{legacy, []string{"arptables", "iptables-restore", "f"}, "iptables-restore", OpRestore},
		{legacy, []string{"iptables-nft", "iptables-restore", "f"}, "iptables-restore", OpRestore},
		{legacy, []string{"main4", "-A", "INPUT"}, "iptables", OpWrite},
		{nft, []string{"iptables-legacy", "iptables-restore", "--noflush", "f"}, "iptables-restore", OpRestore},
		{nft, []string{"ebtables", "-A", "FORWARD", "-j", "DROP"}, "ebtables", OpWrite},
		{nft, []string{"xtables-nft-multi", "iptables-nft-save"}, "iptables-nft-save", OpSave},
		{legacy, []string{long, "-A", "INPUT", "-j", "DROP"}, "", OpWrite},
		// Not a multi binary: argv as it is.
		{"/usr/sbin/iptables-legacy", []string{"ipt", "-A", "INPUT"}, "ipt", OpWrite},
	} {
		s := ParseRun(tc.exe, tc.argv, false)
		if tc.tool != "" && s.Tool != tc.tool || s.Operation != tc.op {
			t.Errorf("%s %q: tool %q, operation %q; want %q, %q", tc.exe, tc.argv, s.Tool, s.Operation, tc.tool, tc.op)
		}
	}
}
