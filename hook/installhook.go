//go:build !hookonly && !agentonly

// Left out of the hookonly build: the runtime never runs the installer.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	hooksd "github.com/iptables-alerter/iptables-alerter/hooks.d"
	"github.com/iptables-alerter/iptables-alerter/lib/hookinstall"
)

var (
	installHookCommand = command{use: "install-hook", summary: "put the hook binary, then its hooks.d JSON, onto a node",
		long: installHookLong, newConfig: func() config { return new(installConfig) }}
	uninstallHookCommand = command{use: "uninstall-hook", summary: "remove the hooks.d JSON, then the hook binary, from a node",
		long: uninstallHookLong, newConfig: func() config { return new(hookFlags) }}
)

const installHookLong = `Copies the hook binary into --bin-dir (atomically: a temporary name in the
same directory, then a rename), then the hooks.d JSON, its path rewritten
for --bin-dir, into --hooks-dir. Paths are the node's; --root is where the
node's "/" is seen (a host mount in a container). Re-running with the same
files changes nothing.

Before writing, it reads the node's CRI-O configuration (` + "`crio config`" + ` when
--root is / and crio is on PATH, else ROOT/etc/crio/crio.conf and
everything under crio.conf.d, as CRI-O reads them) and refuses a
--hooks-dir that CRI-O does not read, naming the ones it does. A crio
binary (in a standard directory or on PATH), socket or running process
without any configuration file is CRI-O on its built-in default
(/usr/share/containers/oci/hooks.d only). A running crio's --hooks-dir
or CONTAINER_HOOKS_DIR wins over the files and ` + "`crio config`" + `, as in CRI-O;
its --config or --config-dir elsewhere is an error. With --runtime auto, a node
without CRI-O (containerd) gets neither binary nor JSON; with
--check-only it says "not checked" (--runtime none says so on purpose,
--runtime crio checks against CRI-O's default).

On a node where --owner-file exists (the OpenShift MachineConfig route's)
it writes nothing: the files are that route's, and its operator marks a
node degraded whose files it manages were changed.

With --wait it then stays until SIGTERM or SIGINT and uninstalls (JSON
first), so a DaemonSet pod being deleted takes the hook off its node,
except where --owner-file exists (at its start or at the stop): the
files stay.
On an error, --wait reports it at once and exits 1 only 30 s later (or
at SIGTERM or SIGINT): a sidecar that exits before the kubelet saw it
running keeps the pod's other containers from starting.

Exit status: 0 installed (or skipped), 1 on an error or a hooks directory
CRI-O does not read, 2 on bad flags.`

const uninstallHookLong = `Removes the hooks.d JSON, syncs its directory, then removes the hook
binary: a JSON whose binary is gone would break container creation.
Files already gone are fine. While --owner-file exists (by default the
environment file the OpenShift MachineConfig route writes) it removes
nothing: the files are that route's (deleting its MachineConfigs removes
the JSON; the binary its unit copied stays). Exit status: 0 done, 1 on an
error.`

// hookFlags are the flags both commands share: where things go.
type hookFlags struct {
	root, binDir, hooksDir, ownerFile string
}

// machineConfigEnv is the file the OpenShift MachineConfig route writes
// (packaging/openshift/machineconfig, iptables-alerter-install.service's
// EnvironmentFile): on a node that has it, the hook's binary and JSON are
// that route's.
const machineConfigEnv = "/etc/iptables-alerter/install.env"

func (h *hookFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&h.root, "root", "/", "where the node's root filesystem is seen")
	fs.StringVar(&h.binDir, "bin-dir", "/usr/local/bin", "node directory for the hook binary")
	fs.StringVar(&h.hooksDir, "hooks-dir", "/etc/containers/oci/hooks.d", "node directory for the hooks.d JSON: one CRI-O reads")
	fs.StringVar(&h.ownerFile, "owner-file", machineConfigEnv, "node file that says another installer (the OpenShift MachineConfig) owns the hook: while it exists, install and uninstall write and remove nothing; empty: always act")
}

func (h hookFlags) files() hookinstall.Files {
	return hookinstall.Files{Root: h.root, BinDir: h.binDir, HooksDir: h.hooksDir,
		BinaryName: "iptables-alerter-hook", JSONName: "iptables-alerter.json", Owner: h.ownerFile}
}

type installConfig struct {
	h                         hookFlags
	binary, jsonPath, runtime string
	noCheck, checkOnly, wait  bool
	noJSON                    bool
}

func (c *installConfig) register(fs *pflag.FlagSet) {
	c.h.register(fs)
	fs.StringVar(&c.binary, "binary", "", "hook binary to copy (default: iptables-alerter-hook next to this program)")
	fs.StringVar(&c.jsonPath, "json", "", "hooks.d JSON to install, naming /usr/local/bin/, rewritten for --bin-dir; refused when CRI-O would refuse it, as it stops at its start on such a file (default: the one built in, hooks.d/iptables-alerter.json of this version)")
	fs.Var(newEnum(&c.runtime, "auto", "auto", "crio", "none"), "runtime", "auto (CRI-O when its configuration is found, else nothing), crio, or none (only check flags)")
	fs.BoolVar(&c.noCheck, "no-check", false, "install even into a hooks directory CRI-O does not read")
	fs.BoolVar(&c.checkOnly, "check-only", false, "only check that CRI-O reads --hooks-dir; write nothing")
	fs.BoolVar(&c.noJSON, "no-json", false, "install only the binary: the JSON comes from elsewhere (a MachineConfig)")
	fs.BoolVar(&c.wait, "wait", false, "after installing, wait for SIGTERM or SIGINT, then uninstall (on a node --owner-file marks, neither)")
}

func (c *installConfig) run(_ []string, s stdio) int {
	say := func(format string, a ...any) { fmt.Fprintf(s.err, "install-hook: "+format+"\n", a...) }
	// With --wait, SIGTERM is caught from the start, not only once
	// installed: as a container's pid 1 the process would ignore one that
	// came while it installs (the kernel drops a signal pid 1 has no
	// handler for), and the pod's deletion would end in SIGKILL with the
	// hook left on the node.
	var stopped <-chan struct{}
	if c.wait {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		stopped = ctx.Done()
	}
	// fail reports err and exits 1; with --wait only after failHold (or
	// at SIGTERM or SIGINT, if sooner). As a DaemonSet's sidecar an
	// installer that exits at once is never seen running by the kubelet,
	// which then never starts the pod's other containers (it only restarts
	// an exited sidecar until one is): a hooks directory CRI-O does not
	// read, or a read-only one, took the agent and the forwarder off the
	// node with the hook. Held, the other containers start; the sidecar
	// still exits 1 and restarts (CrashLoopBackOff, the pod not ready).
	fail := func(err error) int {
		say("%v", err)
		return holdThen(stopped, failHold, 1)
	}
	install, note, err := hookinstall.Decide(context.Background(), c.h.root, c.h.hooksDir, c.runtime, c.noCheck, c.checkOnly)
	if err != nil {
		return fail(err)
	}
	if note != "" {
		say("%s", note)
	}
	if c.checkOnly {
		return 0
	}
	if !install {
		return waitThen(stopped, func() int { return 0 })
	}
	f := c.h.files()
	if err := f.Load(c.binary, c.jsonPath, hooksd.JSON, c.noJSON); err != nil {
		return fail(err)
	}
	if f.OwnerUnseen() {
		say("warning: %s's directory is not under %s: a node of the OpenShift MachineConfig route cannot be told apart, and its files would be written over (mount the node's %s)",
			c.h.ownerFile, c.h.root, filepath.Dir(c.h.ownerFile))
	}
	switch err := hookinstall.Install(f); {
	case errors.Is(err, hookinstall.ErrOwnedElsewhere):
		// Nothing written, so nothing to take off at the stop either.
		say("left %s and %s as they are: %v (the OpenShift MachineConfig route's: writing over them is drift its operator marks the node degraded for)",
			filepath.Join(c.h.binDir, f.BinaryName), filepath.Join(c.h.hooksDir, f.JSONName), err)
		if missing := f.Missing(); len(missing) > 0 {
			// Its unit failed (an image not pulled) or an older
			// sidecar removed them: the node has no hook.
			say("warning: %s missing: the MachineConfig route has not installed the hook on this node (journalctl -u iptables-alerter-install)", strings.Join(missing, " and "))
		}
		return waitThen(stopped, func() int { return 0 })
	case err != nil:
		return fail(err)
	}
	if f.JSON == nil {
		say("installed %s (--no-json: no hooks.d JSON)", filepath.Join(c.h.binDir, f.BinaryName))
	} else {
		say("installed %s, then %s", filepath.Join(c.h.binDir, f.BinaryName), filepath.Join(c.h.hooksDir, f.JSONName))
	}
	return waitThen(stopped, func() int { return uninstall(c.h, s.err) })
}

// failHold is how long install-hook --wait stays up after an error before
// it exits 1: well past the kubelet's next look at the pod (its PLEG
// relists every second), so the sidecar has been seen running.
var failHold = 30 * time.Second

// holdThen, with stopped set (--wait), blocks until it is closed or hold
// has passed and returns code; else it returns code at once.
func holdThen(stopped <-chan struct{}, hold time.Duration, code int) int {
	if stopped == nil {
		return code
	}
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
	}
	return code
}

// waitThen, with stopped set (--wait), blocks until it is closed (SIGTERM
// or SIGINT, maybe long before) and returns then(); else it returns 0 at
// once.
func waitThen(stopped <-chan struct{}, then func() int) int {
	if stopped == nil {
		return 0
	}
	<-stopped
	return then()
}

func (h *hookFlags) run(_ []string, s stdio) int {
	return uninstall(*h, s.err)
}

func uninstall(h hookFlags, stderr io.Writer) int {
	f := h.files()
	if err := hookinstall.Uninstall(f); errors.Is(err, hookinstall.ErrOwnedElsewhere) {
		fmt.Fprintf(stderr, "uninstall-hook: left %s and %s: %v (the OpenShift MachineConfig route's: deleting its MachineConfigs removes the JSON, not the binary)\n",
			filepath.Join(h.hooksDir, f.JSONName), filepath.Join(h.binDir, f.BinaryName), err)
		return 0
	} else if err != nil {
		fmt.Fprintf(stderr, "uninstall-hook: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "uninstall-hook: removed %s, then %s\n", filepath.Join(h.hooksDir, f.JSONName), filepath.Join(h.binDir, f.BinaryName))
	return 0
}
