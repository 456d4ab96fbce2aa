package hookinstall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"
)

// CRIODefaultHooksDirs is what CRI-O reads when no configuration sets
// hooks_dir: upstream CRI-O's built-in default. OpenShift's configuration
// adds /etc/containers/oci/hooks.d and /run/containers/oci/hooks.d.
var CRIODefaultHooksDirs = []string{"/usr/share/containers/oci/hooks.d"}

// Where CRI-O reads its configuration: its --config and --config-dir
// defaults.
const (
	crioConf    = "/etc/crio/crio.conf"
	crioConfDir = "/etc/crio/crio.conf.d"
)

// crioMarks are node paths that mean CRI-O is on the node even without
// any configuration file (it then runs on its built-in defaults): its
// binary where packages and the release bundle put it, and its socket.
var crioMarks = []string{"/usr/bin/crio", "/usr/local/bin/crio", "/usr/sbin/crio", "/run/crio/crio.sock", "/var/run/crio/crio.sock"}

// CRIO is what a node's CRI-O configuration says about hooks.
type CRIO struct {
	// Found: CRI-O is on the node: a configuration file, or (without
	// one) its binary, its socket, or a running crio.
	Found bool
	// HooksDirs are the directories CRI-O reads hooks from.
	HooksDirs []string
	// Source names where HooksDirs came from, for messages.
	Source string
}

// crioTOML is the part of CRI-O's configuration read here, under CRI-O's
// own names and decoded by CRI-O's own TOML library, so every form CRI-O
// accepts (dotted and quoted keys, inline tables, escapes, a key matched
// case-insensitively) means the same here. A pointer: absent keeps what
// an earlier file set, as CRI-O decoding each file over the last.
type crioTOML struct {
	Crio struct {
		Runtime struct {
			HooksDir *[]string `toml:"hooks_dir"`
		} `toml:"runtime"`
	} `toml:"crio"`
}

// NodeCRIO reads the configuration of the CRI-O on the node seen at root.
// On the node itself (root "/") with crio on PATH, it asks `crio config`
// (the effective configuration: defaults, files, environment); elsewhere
// it reads the files, as ReadCRIOConfig.
// A running crio's command line and environment override both (see
// fromProcess): `crio config` is another crio, started without them.
func NodeCRIO(ctx context.Context, root string) (CRIO, error) {
	if filepath.Clean(root) == "/" {
		if bin, err := exec.LookPath("crio"); err == nil {
			c, err := crioConfig(ctx, bin)
			if err != nil {
				return c, err
			}
			return c, c.fromProcess(nodeProc)
		}
	}
	return ReadCRIOConfig(root)
}

// nodeProc is the root whose /proc NodeCRIO searches for a running crio on
// the node itself: "/" (a test points it at a tree of its own, so that a
// crio another test runs on this machine is not seen).
var nodeProc = "/"

// crioConfig runs `crio config`, which prints the effective configuration
// as TOML on stdout (and logs on stderr).
func crioConfig(ctx context.Context, bin string) (CRIO, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "config").Output()
	if err != nil {
		// Its last log line says why (an invalid configuration).
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(bytes.TrimSpace(ee.Stderr)) > 0 {
			lines := bytes.Split(bytes.TrimSpace(ee.Stderr), []byte("\n"))
			err = fmt.Errorf("%w: %s", err, lines[len(lines)-1])
		}
		return CRIO{}, fmt.Errorf("run %q config: %w", bin, err)
	}
	c := CRIO{Found: true, HooksDirs: slices.Clone(CRIODefaultHooksDirs), Source: "CRI-O's built-in default (`crio config`)"}
	if err := c.apply(out, "`crio config`"); err != nil {
		return c, fmt.Errorf("parse `crio config`: %w", err)
	}
	return c, nil
}

// ReadCRIOConfig reads the CRI-O configuration of the node seen at root as
// CRI-O reads it: /etc/crio/crio.conf, then every file under
// /etc/crio/crio.conf.d in CRI-O's order (see crioFiles), each decoded over
// the last: a later hooks_dir replaces an earlier one. Without any file,
// CRI-O's binary or socket on the node still makes it Found, on its
// built-in default. Paths resolve inside root, as on the node.
func ReadCRIOConfig(root string) (CRIO, error) {
	c := CRIO{HooksDirs: slices.Clone(CRIODefaultHooksDirs), Source: "CRI-O's built-in default"}
	files, err := crioFiles(root)
	if err != nil {
		return c, err
	}
	for _, p := range files {
		data, err := readInRoot(root, p)
		if err != nil {
			return c, fmt.Errorf("read CRI-O configuration %q: %w", p, err)
		}
		c.Found = true
		if err := c.apply(data, "hooks_dir in "+p); err != nil {
			return c, fmt.Errorf("parse CRI-O configuration %q: %w", p, err)
		}
	}
	for _, m := range append(slices.Clone(crioMarks), pathCRIO(os.Getenv("PATH"))...) {
		if c.Found {
			break
		}
		if fd, err := openInRoot(root, m, unix.O_PATH); err == nil {
			unix.Close(fd)
			c.Found, c.Source = true, "CRI-O's built-in default: "+m+" and no configuration file"
		}
	}
	return c, c.fromProcess(root)
}

// pathCRIO gives where crio would be on the search path PATH (each
// directory's crio): a CRI-O installed outside the standard directories.
func pathCRIO(path string) []string {
	var out []string
	for _, d := range filepath.SplitList(path) {
		if filepath.IsAbs(d) {
			out = append(out, filepath.Join(d, "crio"))
		}
	}
	return out
}

// fromProcess looks for a running crio among ROOT/proc (the node's
// processes when root is "/" on the node, or a host mount with /proc in
// it), in the node's mount namespace (nodeMountNS): a CRI-O started from
// anywhere. It makes c Found (on CRI-O's built-in default, when nothing
// else did), and its command line and environment win over what c says,
// as they do in CRI-O: --hooks-dir, else CONTAINER_HOOKS_DIR, are the
// hooks directories; --config or --config-dir (CONTAINER_CONFIG,
// CONTAINER_CONFIG_DIR) other than the defaults are an error, since this
// does not know what those files say.
func (c *CRIO) fromProcess(root string) error {
	fd, err := openInRoot(root, "/proc", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil
	}
	d := os.NewFile(uintptr(fd), "/proc")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil
	}
	for _, n := range names {
		if strings.Trim(n, "0123456789") != "" {
			continue
		}
		// A process may end (or be another by now) between the listing
		// and the read: each read stands alone.
		comm, err := readInRoot(root, "/proc/"+n+"/comm")
		if err != nil || string(bytes.TrimSpace(comm)) != "crio" || !nodeMountNS(root, n) {
			continue
		}
		cmdline, _ := readInRoot(root, "/proc/"+n+"/cmdline")
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if crioCommand(args) {
			// `crio config`, `crio status`...: not the daemon, whose
			// settings are asked for (/proc lists it later when its pid
			// is higher).
			continue
		}
		// Its environment needs ptrace access, as its namespace did.
		environ, _ := readInRoot(root, "/proc/"+n+"/environ")
		env := strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")
		if !c.Found {
			c.Found, c.Source = true, "CRI-O's built-in default: crio running (pid "+n+") and no configuration file"
		}
		if dirs, how := crioSetting(args, env, "hooks-dir", "CONTAINER_HOOKS_DIR"); len(dirs) > 0 {
			// One value with commas is a list, as CRI-O splits it.
			if len(dirs) == 1 && strings.Contains(dirs[0], ",") {
				dirs = strings.Split(dirs[0], ",")
			}
			c.HooksDirs = c.HooksDirs[:0]
			for _, dir := range dirs {
				c.HooksDirs = append(c.HooksDirs, filepath.Clean(strings.TrimSpace(dir)))
			}
			c.Source = how + " of the running crio (pid " + n + ")"
			return nil
		}
		for _, f := range []struct{ name, env, def string }{{"config", "CONTAINER_CONFIG", crioConf}, {"config-dir", "CONTAINER_CONFIG_DIR", crioConfDir}} {
			if v, how := crioSetting(args, env, f.name, f.env); len(v) > 0 && filepath.Clean(v[len(v)-1]) != f.def {
				return fmt.Errorf("crio (pid %s) runs with %s %s, which is not read here: run install-hook on the node with crio on PATH (it asks `crio config`), or pass --no-check", n, how, v[len(v)-1])
			}
		}
		return nil
	}
	return nil
}

// crioCommands are CRI-O's subcommands (crio --help).
var crioCommands = map[string]bool{"check": true, "complete": true, "completion": true, "config": true, "help": true, "h": true,
	"man": true, "markdown": true, "md": true, "status": true, "version": true, "wipe": true}

// crioCommand tells a crio command line that runs a subcommand: a word
// not after an option that takes it as its value (a word after an
// option is taken for its value, so `--enable-metrics status` is not
// seen; the daemon's command lines hold options only).
func crioCommand(args []string) bool {
	for i := 1; i < len(args); i++ {
		prev := args[i-1]
		if crioCommands[args[i]] && (i == 1 || !strings.HasPrefix(prev, "-") || strings.Contains(prev, "=")) {
			return true
		}
	}
	return false
}

// crioSetting is a CRI-O option from its command line (--name, and -c for
// config), else from its environment variable: the values and which of
// the two set them.
func crioSetting(args, env []string, name, envName string) ([]string, string) {
	v := flagValues(args, "--"+name)
	if name == "config" {
		v = append(v, flagValues(args, "--c")...)
	}
	if len(v) > 0 {
		return v, "--" + name
	}
	for _, e := range env {
		if val, ok := strings.CutPrefix(e, envName+"="); ok {
			return []string{val}, envName
		}
	}
	return nil, ""
}

// nodeMountNS says whether process pid runs in the node's mount
// namespace, as CRI-O does: any pod can name a process crio, but not put
// it there. The node's is ours when root is "/" (we see the node's files
// as they are), else that of the node's pid 1. Reading another process'
// namespace needs ptrace access (root with CAP_SYS_PTRACE, as on the node
// itself); without it the process is not taken.
func nodeMountNS(root, pid string) bool {
	ref := filepath.Join(root, "proc/1/ns/mnt")
	if filepath.Clean(root) == "/" {
		ref = "/proc/self/ns/mnt"
	}
	node, err := os.Readlink(ref)
	if err != nil {
		return false
	}
	ns, err := os.Readlink(filepath.Join(root, "proc", pid, "ns/mnt"))
	return err == nil && ns == node
}

// flagValues gives the values of flag name in a command line, as
// "--name value" or "--name=value" (one dash too, as CRI-O's CLI library
// takes it), in order.
func flagValues(args []string, name string) []string {
	var out []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") {
			a = "-" + a
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			out = append(out, v)
		} else if a == name && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
	}
	return out
}

// apply decodes one TOML configuration over c.
func (c *CRIO) apply(data []byte, source string) error {
	var t crioTOML
	if _, err := toml.Decode(string(data), &t); err != nil {
		return err
	}
	if t.Crio.Runtime.HooksDir == nil {
		return nil
	}
	c.HooksDirs = []string{}
	for _, d := range *t.Crio.Runtime.HooksDir {
		c.HooksDirs = append(c.HooksDirs, filepath.Clean(d))
	}
	c.Source = source
	return nil
}

// crioFiles lists the node paths of the configuration files CRI-O reads,
// in its order. crio.conf when it exists; then crio.conf.d, skipped when
// it does not exist (os.Stat), else walked as filepath.Walk walks it:
// names in byte order, a subdirectory's files where its name sorts, every
// name (hidden files and backups too), a symlink read as a file. Walk
// does not follow a symlinked crio.conf.d either: CRI-O then fails to
// read it as a file, and so does ReadCRIOConfig.
func crioFiles(root string) ([]string, error) {
	var files []string
	switch fd, err := openInRoot(root, crioConf, unix.O_PATH); {
	case err == nil:
		unix.Close(fd)
		files = append(files, crioConf)
	case !errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("look up CRI-O configuration %q: %w", crioConf, err)
	default:
		// Seen from a container (a DaemonSet mounts only /etc/crio), a
		// symlink whose target is missing may name a file the node has:
		// CRI-O reads it there. On the node itself it is dangling, and CRI-O
		// skips it as absent.
		if filepath.Clean(root) == "/" {
			break
		}
		if fd, err := openInRoot(root, crioConf, unix.O_PATH|unix.O_NOFOLLOW); err == nil {
			unix.Close(fd)
			return nil, fmt.Errorf("CRI-O configuration %q is a symlink to a file not seen under %s: mount its target there too, or pass --no-check", crioConf, root)
		}
	}
	switch fd, err := openInRoot(root, crioConfDir, unix.O_PATH); {
	case errors.Is(err, unix.ENOENT):
		return files, nil
	case err != nil:
		return nil, fmt.Errorf("look up CRI-O configuration %q: %w", crioConfDir, err)
	default:
		unix.Close(fd)
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		fd, err := openInRoot(root, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			files = append(files, dir)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read CRI-O configuration directory %q: %w", dir, err)
		}
		d := os.NewFile(uintptr(fd), dir)
		defer d.Close()
		names, err := d.Readdirnames(-1)
		if err != nil {
			return fmt.Errorf("read CRI-O configuration directory %q: %w", dir, err)
		}
		slices.Sort(names)
		for _, n := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("stat CRI-O configuration %q: %w", path.Join(dir, n), err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				files = append(files, path.Join(dir, n))
				continue
			}
			if err := walk(path.Join(dir, n)); err != nil {
				return err
			}
		}
		return nil
	}
	return files, walk(crioConfDir)
}

// openInRoot opens a node path inside root (openat2 RESOLVE_IN_ROOT):
// symlinks resolve as on the node and never lead out of root.
func openInRoot(root, nodePath string, flags uint64) (int, error) {
	rfd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	rel := strings.TrimPrefix(path.Clean(nodePath), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(rfd, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: nodePath, Err: err}
	}
	return fd, nil
}

// readInRoot reads a regular file at a node path inside root.
func readInRoot(root, nodePath string) ([]byte, error) {
	// O_NONBLOCK: a FIFO planted there must not hang the installer.
	fd, err := openInRoot(root, nodePath, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), nodePath)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%v)", st.Mode().Type())
	}
	return io.ReadAll(f)
}

// ErrNotRead is returned (wrapped) when CRI-O does not read a hooks directory.
var ErrNotRead = errors.New("CRI-O does not read this hooks directory")

// Check says whether CRI-O reads dir, and when not, which directories to
// use instead.
func (c CRIO) Check(dir string) error {
	if slices.Contains(c.HooksDirs, filepath.Clean(dir)) {
		return nil
	}
	return fmt.Errorf("check hooks directory %q: %w: it reads only %s (%s); install into one of those, or add %q to hooks_dir in a file under /etc/crio/crio.conf.d/ and restart CRI-O",
		dir, ErrNotRead, strings.Join(c.HooksDirs, ", "), c.Source, dir)
}
