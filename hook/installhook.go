//go:build !hookonly

// Left out of the hookonly build: the runtime never runs the installer.

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/iptables-alerter/iptables-alerter/lib/hookinstall"
)

var (
	installHookCommand   = command{name: "install-hook", summary: "put the hook binary, then its hooks.d JSON, onto a node", run: runInstallHook}
	uninstallHookCommand = command{name: "uninstall-hook", summary: "remove the hooks.d JSON, then the hook binary, from a node", run: runUninstallHook}
)

const installHookSynopsis = `install-hook [FLAGS]

Copies the hook binary into --bin-dir (atomically: a temporary name in the
same directory, then a rename), then the hooks.d JSON, its path rewritten
for --bin-dir, into --hooks-dir. Paths are the node's; --root is where the
node's "/" is seen (a host mount in a container). Re-running with the same
files changes nothing.

Before writing, it reads the node's CRI-O configuration (` + "`crio config`" + ` when
--root is / and crio is on PATH, else ROOT/etc/crio/crio.conf and
everything under crio.conf.d, as CRI-O reads them) and refuses a
--hooks-dir that CRI-O does not read, naming the ones it does. A crio
binary or socket without any configuration file is CRI-O on its built-in
default (/usr/share/containers/oci/hooks.d only). With --runtime auto, a
node without CRI-O (containerd) gets neither binary nor JSON.

With --wait it then stays until SIGTERM or SIGINT and uninstalls (JSON
first), so a DaemonSet pod being deleted takes the hook off its node.

Exit status: 0 installed (or skipped), 1 on an error or a hooks directory
CRI-O does not read, 2 on bad flags.`

const uninstallHookSynopsis = `uninstall-hook [FLAGS]

Removes the hooks.d JSON, syncs its directory, then removes the hook
binary: a JSON whose binary is gone would break container creation.
Files already gone are fine. Exit status: 0 done, 1 on an error.`

// hookFlags are the flags both commands share: where things go.
type hookFlags struct {
	root, binDir, hooksDir string
}

func (h *hookFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.root, "root", "/", "where the node's root filesystem is seen")
	fs.StringVar(&h.binDir, "bin-dir", "/usr/local/bin", "node directory for the hook binary")
	fs.StringVar(&h.hooksDir, "hooks-dir", "/etc/containers/oci/hooks.d", "node directory for the hooks.d JSON: one CRI-O reads")
}

func (h hookFlags) files() hookinstall.Files {
	return hookinstall.Files{Root: h.root, BinDir: h.binDir, HooksDir: h.hooksDir,
		BinaryName: "iptables-alerter-hook", JSONName: "iptables-alerter.json"}
}

func runInstallHook(args []string, _ io.Reader, stderr io.Writer) int {
	var h hookFlags
	var binary, jsonPath, runtime string
	var noCheck, checkOnly, wait, noJSON bool
	fs := newFlagSet("install-hook", installHookSynopsis, stderr)
	h.register(fs)
	fs.StringVar(&binary, "binary", "", "hook binary to copy (default: iptables-alerter-hook next to this program)")
	fs.StringVar(&jsonPath, "json", "/usr/share/iptables-alerter/iptables-alerter.json", "hooks.d JSON to install (it names /usr/local/bin/, rewritten for --bin-dir)")
	fs.StringVar(&runtime, "runtime", "auto", "auto (CRI-O when its configuration is found, else nothing), crio, or none (only check flags)")
	fs.BoolVar(&noCheck, "no-check", false, "install even into a hooks directory CRI-O does not read")
	fs.BoolVar(&checkOnly, "check-only", false, "only check that CRI-O reads --hooks-dir; write nothing")
	fs.BoolVar(&noJSON, "no-json", false, "install only the binary: the JSON comes from elsewhere (a MachineConfig)")
	fs.BoolVar(&wait, "wait", false, "after installing, wait for SIGTERM or SIGINT, then uninstall")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if runtime != "auto" && runtime != "crio" && runtime != "none" {
		fmt.Fprintf(stderr, "install-hook: --runtime %q: want auto, crio or none\n", runtime)
		return 2
	}
	say := func(format string, a ...any) { fmt.Fprintf(stderr, "install-hook: "+format+"\n", a...) }

	crio, err := hookinstall.NodeCRIO(context.Background(), h.root)
	if err != nil {
		say("%v", err)
		return 1
	}
	install := runtime == "crio" || (runtime == "auto" && crio.Found)
	if !install && !checkOnly {
		say("no CRI-O under %s (no configuration file, crio binary or socket): nothing installed (containerd and other runtimes without hooks.d are covered by the NRI agent)", h.root)
		return waitThen(wait, func() int { return 0 })
	}
	// Without any configuration file a CRI-O forced by --runtime crio
	// runs on its built-in default.
	switch {
	case noCheck:
	case crio.Found || runtime == "crio":
		if err := crio.Check(h.hooksDir); err != nil {
			say("%v", err)
			return 1
		}
		say("CRI-O reads %s (%s)", h.hooksDir, crio.Source)
	default:
		say("no CRI-O under %s (no configuration file, crio binary or socket): hooks directory not checked", h.root)
	}
	if checkOnly {
		return 0
	}

	f := h.files()
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			say("find this program: %v", err)
			return 1
		}
		binary = filepath.Join(filepath.Dir(exe), "iptables-alerter-hook")
	}
	if f.Binary, err = os.ReadFile(binary); err != nil {
		say("read hook binary: %v", err)
		return 1
	}
	json, err := os.ReadFile(jsonPath)
	if err != nil && !noJSON {
		say("read hooks.d JSON: %v", err)
		return 1
	}
	if !noJSON {
		f.JSON = hookinstall.BinaryPath(json, h.binDir)
	}
	if err := hookinstall.Install(f); err != nil {
		say("%v", err)
		return 1
	}
	say("installed %s, then %s", filepath.Join(h.binDir, f.BinaryName), filepath.Join(h.hooksDir, f.JSONName))
	return waitThen(wait, func() int { return uninstall(h, stderr) })
}

// waitThen, with wait set, blocks until SIGTERM or SIGINT and returns
// then(); else it returns 0 at once.
func waitThen(wait bool, then func() int) int {
	if !wait {
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	return then()
}

func runUninstallHook(args []string, _ io.Reader, stderr io.Writer) int {
	var h hookFlags
	fs := newFlagSet("uninstall-hook", uninstallHookSynopsis, stderr)
	h.register(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	return uninstall(h, stderr)
}

func uninstall(h hookFlags, stderr io.Writer) int {
	f := h.files()
	if err := hookinstall.Uninstall(f); err != nil {
		fmt.Fprintf(stderr, "uninstall-hook: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "uninstall-hook: removed %s, then %s\n", filepath.Join(h.hooksDir, f.JSONName), filepath.Join(h.binDir, f.BinaryName))
	return 0
}
