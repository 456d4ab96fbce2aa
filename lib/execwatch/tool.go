package execwatch

import (
	"path"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
)

// Backends of a tool, from the binary that runs.
const (
	BackendLegacy = "legacy"
	BackendNft    = "nft"
)

// Operations of a command, from its name and argv.
const (
	OpWrite   = "write"
	OpRead    = "read"
	OpSave    = "save"
	OpRestore = "restore"
)

// families are the tools' names without their suffixes (-legacy, -nft,
// -save, -restore): each is one applet of the xtables multi binaries, or
// a binary of its own in older releases (ebtables-legacy, arptables-legacy,
// iptables before 1.8).
var families = []string{"iptables", "ip6tables", "arptables", "ebtables"}

// commCandidate is the first test when the binary cannot be read (no
// ptrace access): the kernel's name of the process (the executed file's
// base name, at most 15 bytes) starts like an iptables tool. A wrapper
// script named like one (kube-proxy's iptables-wrapper, an alternatives
// link to it) passes too, and toolOf then decides by its argv[0].
func commCandidate(comm string) bool {
	if strings.HasPrefix(comm, "xtables-") {
		return true
	}
	for _, f := range families {
		if strings.HasPrefix(comm, f) {
			return true
		}
	}
	return false
}

// toolOf tells whether the executed binary (the target of /proc/PID/exe,
// its base name) is an iptables tool, and its backend. Every x_tables
// tool before iptables 1.8 (xtables-multi, iptables-multi, standalone
// binaries) is legacy; 1.8 names its multi binaries by backend. A shell or
// any other interpreter running a script named like a tool (kube-proxy's
// iptables-wrapper, an alternatives link to it) is not one: the wrapper's
// own exec of the real tool is a second exec, which is. Nor is a binary
// named as a wrapper: kubernetes-sigs/iptables-wrappers' Go
// iptables-wrapper (flannel's, kube-router's images link iptables* to it)
// runs the real tool as its child and exits with its status, so taking it
// for a tool would report each command twice, the wrapper's copy legacy
// whatever the backend, and an nft failure a legacy one.
//
// The name must be a tool's whole (toolName): a binary merely named
// like one (iptables_exporter, iptables-exporter, a daemon) is none. Taken
// for one, it held a pending slot for its life, its command line (perhaps
// secrets) was copied into findings and Events, and its run was recorded
// as a legacy read.
func toolOf(exe string) (backend string, ok bool) {
	base := path.Base(strings.TrimSuffix(exe, " (deleted)"))
	switch {
	case base == "xtables-nft-multi":
		return BackendNft, true
	case multiBinary(base):
		return BackendLegacy, true
	}
	return toolName(base)
}

// toolName tells whether base is a tool's name and its backend: a family
// (iptables, ip6tables, arptables, ebtables), then its backend's suffix
// (-legacy, -nft: none for iptables before 1.8, legacy), then the
// operation's (-save, -restore, -translate, -restore-translate; -multi,
// the multi binary of releases before 1.8), each at most once.
func toolName(base string) (backend string, ok bool) {
	for _, f := range families {
		rest, found := strings.CutPrefix(base, f)
		if !found {
			continue
		}
		backend = BackendLegacy
		if r, nft := strings.CutPrefix(rest, "-nft"); nft {
			rest, backend = r, BackendNft
		} else {
			rest = strings.TrimPrefix(rest, "-legacy")
		}
		switch rest {
		case "", "-save", "-restore", "-translate", "-restore-translate", "-multi":
			return backend, true
		}
	}
	return "", false
}

// Shape is what a command line says, never its values: the tool's name,
// what it does, and the table and chain it names.
type Shape struct {
	// Tool is the applet run ("iptables-legacy", "ip6tables-restore"),
	// from argv[0] (the multi binaries dispatch on it).
	Tool string
	// Family is the tool's family: iptables, ip6tables, arptables or
	// ebtables.
	Family    string
	Operation string
	// Command is the option that chose the operation ("-A", "--check");
	// "" for the save and restore tools, and for a Guessed write.
	Command string
	Table   string
	Chain   string
	// Test: a restore that only checks its input (-t/--test) writes
	// nothing.
	Test bool
	// Guessed: a write guessed from a command line whose arguments were
	// left out (ParseArgvCut); it may be a -C whose exit 1 answers no,
	// so only its other failures count.
	Guessed bool
}

// Write tells whether the command changes the kernel's rules when it
// succeeds.
func (s Shape) Write() bool {
	return s.Operation == OpWrite || s.Operation == OpRestore && !s.Test
}

// Answers tells whether an exit status of 1 is an answer, not a failure:
// -C (does a matching rule exist) and -D (a rule to delete) say no with it;
// -N of a chain that exists, and -X and -F of one that does not, find the
// state asked for already there (idempotent scripts run them at every
// container start, the pod's netns outliving a restarted container), and
// a refused -X (a chain still referenced) leaves the rules as they were.
// Checked with iptables-nft and iptables-legacy 1.8.9: each exits 1 (but
// iptables-nft's refused -X, which exits 4: DeletesChain), and never for
// missing kernel support (3 or 4). ebtables' -C changes counters: a
// write, whose 1 is a failure.
func (s Shape) Answers() bool {
	switch s.Command {
	case "-C":
		return s.Family != "ebtables"
	case "--check", "-D", "--delete", "-N", "--new-chain", "-X", "--delete-chain", "-F", "--flush":
		return true
	}
	return false
}

// DeletesChain tells whether the command is -X: iptables-nft refuses one
// of a chain still referenced with exit 4 (EBUSY, 1.8.9), the status it
// gives for missing kernel support too.
func (s Shape) DeletesChain() bool { return s.Command == "-X" || s.Command == "--delete-chain" }

// long commands and their short letters.
var longCommands = map[string]byte{
	"--append": 'A', "--check": 'C', "--delete": 'D', "--insert": 'I', "--replace": 'R',
	"--list": 'L', "--list-rules": 'S', "--flush": 'F', "--zero": 'Z', "--new-chain": 'N',
	"--delete-chain": 'X', "--policy": 'P', "--rename-chain": 'E',
}

// ebtables' commands differ (ebtables(8), both backends 1.8.9): -C and
// --change-counters change a rule's counters, as -Z zeroes them (a
// write); --init-table and --atomic-commit replace the kernel's table
// (writes, without a short letter: 'T' and 'K' stand for them here, no
// ebtables option uses either); --check exists only long.
var ebCommands = map[string]byte{
	"--append": 'A', "--delete": 'D', "--insert": 'I', "--list": 'L', "--flush": 'F', "--zero": 'Z',
	"--policy": 'P', "--new-chain": 'N', "--rename-chain": 'E', "--delete-chain": 'X',
	"--change-counters": 'C', "--check": 'c', "--init-table": 'T', "--atomic-commit": 'K',
}

// ebShort are ebtables' short command letters; ebWrites those that write.
// -R (replace, a write) and -S (list as commands) came with 1.8.11's
// shared parser; an older ebtables refuses them either way.
const (
	ebShort  = "ADILFZPNEXCRS"
	ebWrites = "ADIFZPNEXCTKR"
)

// ebOptions are ebtables' own long options beside its commands, for the
// prefix match (the extensions' options, such as --ip-src, join them
// when loaded and are not modelled).
var ebOptions = []string{"--table", "--proto", "--protocol", "--src", "--source", "--dst", "--destination",
	"--in-if", "--in-interface", "--out-if", "--out-interface", "--logical-in", "--logical-out",
	"--jump", "--match", "--set-counters", "--modprobe", "--concurrent", "--verbose", "--version", "--help",
	"--atomic-file", "--atomic-init", "--atomic-save", "--Ln", "--Lc", "--Lx", "--Lmac2"}

// The tools' own long options (iptables(8), iptables-restore(8)), beside
// the commands: getopt_long takes any prefix of one that names no other
// ("--app" is --append, "--tab nat" --table nat, "--tes" a restore's
// --test; both backends, 1.8.9), so a command is told by its prefix among
// all of them, and a prefix several share is refused by the tool as by
// longOption.
var (
	longOptions = []string{"--table", "--source", "--src", "--destination", "--dst", "--protocol",
		"--in-interface", "--out-interface", "--jump", "--goto", "--match", "--numeric", "--verbose",
		"--wait", "--wait-interval", "--exact", "--fragment", "--line-numbers", "--modprobe",
		"--set-counters", "--ipv4", "--ipv6", "--version", "--help"}
	restoreOptions = []string{"--counters", "--verbose", "--version", "--test", "--help", "--noflush",
		"--wait", "--wait-interval", "--table", "--modprobe", "--ipv4", "--ipv6"}
)

// longOption is the option name stands for among a tool's options and
// commands: itself when it is one, else the one option it is a prefix
// of; "" when none or several.
func longOption(name string, options []string, commands map[string]byte) string {
	found := ""
	match := func(o string) bool {
		if o == name {
			found = o
			return true
		}
		if strings.HasPrefix(o, name) && len(name) > 2 {
			if found != "" && found != o {
				found = "-"
			} else {
				found = o
			}
		}
		return false
	}
	for _, o := range options {
		if match(o) {
			return o
		}
	}
	for o := range commands {
		if match(o) {
			return o
		}
	}
	if found == "-" {
		return ""
	}
	return found
}

// writes are the commands that change rules; every other is a read.
const writes = "ADIRFZNXPE"

// short options that take an argument: the rest of their cluster, or the
// next word, is that argument.
const withArg = "jmpsdiogwWMt"

// ParseArgv reads a command line (argv[0] first). The tools refuse a
// second command option, so a second one seen is an option's argument
// (getopt hands "-L" to --comment as its text) or the first was: a write
// among them decides (its command and chain), never a read before it.
func ParseArgv(argv []string) Shape { return ParseArgvCut(argv, false) }

// ParseRun is ParseArgvCut of a run of the binary exe: a multi binary
// (what the tools' names link to) takes its applet from argv[0]'s name
// when that is one of its applets, and else from argv[1] (xtables-multi's
// subcmd_main), so a name of the pod's choosing (`exec -a x`, a link of
// its own) before `iptables-restore` is not read as the tool (a read
// whose failure is no breakage), the binary's applet is. An argv[0] cut
// short (past MaxArg) may have lost the name that chose: it stays.
func ParseRun(exe string, argv []string, leftOut bool) Shape {
	multi := path.Base(strings.TrimSuffix(exe, " (deleted)"))
	if multiBinary(multi) && len(argv) > 0 && !strings.HasSuffix(argv[0], safetext.Ellipsis) {
		switch name := path.Base(argv[0]); {
		case applets[name] != "":
			// main4, save6...: the short names of the tools.
			argv = append([]string{applets[name]}, argv[1:]...)
		case !multiBinary(name) && !appletOf(multi, name):
			argv = append([]string{multi}, argv[1:]...)
		}
	}
	return ParseArgvCut(argv, leftOut)
}

// appletOf tells whether name is one of the multi binary's applets by a
// tool's name (ParseRun takes the short ones, main4...): those of its backend
// (xtables-nft-multi has no -legacy names; the legacy ones only iptables
// and ip6tables, none -nft, nor arptables, ebtables or a translation).
func appletOf(multi, name string) bool {
	if _, ok := toolName(name); !ok {
		return false
	}
	if multi == "xtables-nft-multi" {
		return !strings.Contains(name, "-legacy")
	}
	f := familyOf(name)
	return (f == "iptables" || f == "ip6tables") && !strings.Contains(name, "-nft") && !strings.HasSuffix(name, "-translate")
}

// ParseArgvCut is ParseArgv of a command line whose arguments past MaxArgs
// or the bytes read were left out (leftOut): what the part read names, if
// anything, short of a write, save or restore, may be an option's
// argument (getopt hands "-L" to --comment as its text) before a write
// left out, so it is taken for a write (Guessed), whose failure counts
// (but an exit 1: a -C's no) and whose legacy run is scanned at once. A
// pod that puts its -A past the cut is not read as a listing.
func ParseArgvCut(argv []string, leftOut bool) Shape {
	if len(argv) == 0 {
		return Shape{}
	}
	tool := path.Base(argv[0])
	args := argv[1:]
	// Run as the multi binary itself, the applet is the first argument,
	// compared whole (a path there names no applet); main4, save6 and the
	// like are the short names of the iptables and ip6tables applets.
	// Only the multi binaries: their other applets (xtables-monitor
	// --trace, xtables-translate) take options there.
	if multiBinary(tool) && len(args) > 0 {
		tool, args = args[0], args[1:]
		if t, ok := applets[tool]; ok {
			tool = t
		}
	}
	s := Shape{Tool: tool, Family: familyOf(tool)}
	if strings.HasSuffix(tool, "-translate") {
		// iptables-translate and the like print nftables syntax and
		// change nothing, whatever the command they translate.
		s.Operation = OpRead
		return s
	}
	switch {
	case strings.HasSuffix(tool, "-save"):
		s.Operation = OpSave
	case strings.HasSuffix(tool, "-restore"):
		s.Operation = OpRestore
	}
	restore := s.Operation == OpRestore
	commands := s.Operation != OpSave && !restore
	options, longs, shorts, written := longOptions, longCommands, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", writes
	switch {
	case restore:
		// A restore takes no command: its options alone.
		options, longs = restoreOptions, nil
	case s.Family == "ebtables":
		options, longs, shorts, written = ebOptions, ebCommands, ebShort, ebWrites
	}
	// command takes a command option: the first, unless a write follows a
	// read.
	command := func(name string, c byte) bool {
		w := strings.IndexByte(written, c) >= 0
		if s.Command != "" && (s.Operation == OpWrite || !w) {
			return false
		}
		s.Command, s.Chain, s.Operation = name, "", OpRead
		if w {
			s.Operation = OpWrite
		}
		return true
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
				return args[i]
			}
			return ""
		}
		switch {
		case a == "--":
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a, "=")
			if extOption(name, args) {
				// An extension's own option, not the command it abbreviates.
				continue
			}
			name = longOption(name, options, longs)
			if name == "--table" {
				if !hasVal {
					val = next()
				}
				s.Table = val
			} else if name == "--test" && restore {
				s.Test = true
			} else if c, ok := longs[name]; ok && commands && command(name, c) {
				if s.Chain = val; !hasVal {
					s.Chain = next()
				}
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for j := 1; j < len(a); j++ {
				c := a[j]
				// -t names the table, but for a restore it is --test,
				// and -T (--table) names the one table it restores.
				if c == 't' && restore {
					s.Test = true
					continue
				}
				if c == 't' || (c == 'T' && restore) {
					if s.Table = a[j+1:]; s.Table == "" {
						s.Table = next()
					}
					break
				}
				if restore && (c == 'w' || c == 'W') {
					// A restore's wait takes no argument in its word,
					// only a number as the next one.
					if j == len(a)-1 {
						next()
					}
					continue
				}
				if strings.IndexByte(withArg, c) >= 0 {
					if j == len(a)-1 {
						next()
					}
					break
				}
				if strings.IndexByte(shorts, c) >= 0 && commands {
					// The rest of the word is the command's argument
					// (getopt's "A:", "L::"): -LINPUT lists INPUT, its
					// I is no insert.
					if command("-"+string(c), c) {
						if s.Chain = a[j+1:]; s.Chain == "" {
							s.Chain = next()
						}
					}
					break
				}
			}
		}
	}
	switch {
	case leftOut && (s.Operation == "" || s.Operation == OpRead):
		// What named a read may be an option's argument: not a
		// command, nor its chain.
		s.Operation, s.Command, s.Chain, s.Guessed = OpWrite, "", "", true
	case s.Operation == "":
		s.Operation = OpRead
	}
	if s.Table == "" && s.Operation != OpSave && s.Operation != OpRestore {
		s.Table = "filter"
	}
	return s
}

// multiBinary tells whether name is a multi binary's, which runs the
// applet its first argument names.
func multiBinary(name string) bool {
	switch name {
	case "xtables-multi", "xtables-legacy-multi", "xtables-nft-multi":
		return true
	}
	return false
}

// applets are the multi binaries' short applet names (xtables-multi.c).
var applets = map[string]string{
	"main4": "iptables", "main6": "ip6tables",
	"save4": "iptables-save", "save6": "ip6tables-save",
	"restore4": "iptables-restore", "restore6": "ip6tables-restore",
}

// extAbbrevs are extension options whose names are also prefixes of a
// command, by the extension that brings them: with it loaded (-m policy,
// -j CLUSTERIP) getopt takes the exact option, not the command ("--pol
// ipsec" is xt_policy's, not --policy). No other extension option of
// iptables 1.8.11 names a command's prefix.
var extAbbrevs = map[string]string{"--pol": "policy", "--new": "CLUSTERIP"}

// extOption tells whether the long option name is the own option of an
// extension args load with -m/--match or -j/--jump (its options join the
// tool's when it reads them). args are read only for the two such names.
func extOption(name string, args []string) bool {
	ext, ok := extAbbrevs[name]
	if !ok {
		return false
	}
	for i, a := range args {
		switch a {
		case "-m", "--match", "-j", "--jump":
			if i+1 < len(args) && args[i+1] == ext {
				return true
			}
		case "-m" + ext, "-j" + ext:
			return true
		}
	}
	return false
}

// familyOf is the tool family a name belongs to, "" for none.
func familyOf(tool string) string {
	for _, f := range families {
		if strings.HasPrefix(tool, f) {
			return f
		}
	}
	return ""
}
