package hookinstall

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path -> content) under a fresh root. A path ending
// in "/" is an empty directory; a content starting with "-> " makes a
// symlink to the rest.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var err error
		if target, ok := strings.CutPrefix(c, "-> "); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(c), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// upstreamConf is shaped like the crio.conf upstream CRI-O generates:
// hooks_dir commented out, so the built-in default applies.
const upstreamConf = `# The CRI-O configuration file.
[crio]
root = "/var/lib/containers/storage"

[crio.runtime]
default_runtime = "crun"
# Path to OCI hooks directories for automatically executed hooks. If one of the
# directories does not exist, then CRI-O will automatically skip them.
# hooks_dir = [
# 	"/usr/share/containers/oci/hooks.d",
# ]

[crio.image]
# hooks_dir = ["/nowhere"]
`

// openshiftDropin is shaped like the drop-in OpenShift's machine config writes.
const openshiftDropin = `[crio.runtime]
hooks_dir = [
    "/etc/containers/oci/hooks.d", # the admin's
    "/run/containers/oci/hooks.d",
    "/usr/share/containers/oci/hooks.d",
]
`

const builtin = "/usr/share/containers/oci/hooks.d"

func TestReadCRIOConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		found bool
		dirs  string
		from  string
	}{
		{"no CRI-O (containerd node, empty /etc/crio from the DaemonSet's DirectoryOrCreate)",
			map[string]string{"etc/containerd/config.toml": "version = 2\n", "etc/crio/crio.conf.d/.keep/": ""}, false, builtin, "built-in"},
		{"upstream crio.conf, hooks_dir commented", map[string]string{"etc/crio/crio.conf": upstreamConf}, true, builtin, "built-in"},
		{"OpenShift drop-in", map[string]string{"etc/crio/crio.conf": upstreamConf, "etc/crio/crio.conf.d/00-default": openshiftDropin}, true,
			"/etc/containers/oci/hooks.d /run/containers/oci/hooks.d " + builtin, "/etc/crio/crio.conf.d/00-default"},

		// The five forms regular expressions misread.
		{"dotted key under [crio]", map[string]string{"etc/crio/crio.conf": "[crio]\nruntime.hooks_dir = [\"/dotted\"]\n"}, true, "/dotted", "crio.conf"},
		{"dotted key at the top", map[string]string{"etc/crio/crio.conf": "crio.runtime.hooks_dir = [\"/top\"]\n[crio.image]\n"}, true, "/top", "crio.conf"},
		{"quoted keys", map[string]string{"etc/crio/crio.conf": "['crio'.\"runtime\"]\n\"hooks_dir\" = [\"/q\"]\n"}, true, "/q", "crio.conf"},
		{"inline table", map[string]string{"etc/crio/crio.conf": "[crio]\nruntime = { hooks_dir = [\"/inline\"], default_runtime = \"crun\" }\n"}, true, "/inline", "crio.conf"},
		{"] inside a string", map[string]string{"etc/crio/crio.conf": "[crio.runtime]\nhooks_dir = [ \"/odd]name\",\n  \"/second\",\n]\n"}, true, "/odd]name /second", "crio.conf"},
		{"escapes", map[string]string{"etc/crio/crio.conf": "[crio.runtime]\nhooks_dir = [\"/usr/share/containers/oci/hooks\\u002ed\", \"/tab\\there\", '/lit\\n']\n"}, true,
			builtin + " /tab\there /lit\\n", "crio.conf"},
		{"hooks_dir in another table", map[string]string{"etc/crio/crio.conf": "[crio.runtime.runtimes.crun]\nhooks_dir = [\"/not/this\"]\n[crio.image]\nhooks_dir = [\"/nor/this\"]\n"},
			true, builtin, "built-in"},
		{"key case folded as CRI-O's decoder does", map[string]string{"etc/crio/crio.conf": "[crio.runtime]\nHooks_Dir = [\"/folded\"]\n"}, true, "/folded", "crio.conf"},

		// crio.conf.d as CRI-O walks it.
		{"later drop-in wins, absent key keeps the earlier", map[string]string{
			"etc/crio/crio.conf.d/10-crio.conf": "[crio.runtime]\nhooks_dir = [\"/a\"]\n",
			"etc/crio/crio.conf.d/20-site.conf": "[crio.runtime]\nhooks_dir = ['/b', \"/c/\"]\n",
			"etc/crio/crio.conf.d/30-other":     "[crio.runtime.runtimes.crun]\nruntime_path = \"/usr/bin/crun\"\n",
		}, true, "/b /c", "/etc/crio/crio.conf.d/20-site.conf"},
		{"drop-ins over crio.conf", map[string]string{
			"etc/crio/crio.conf":            "[crio.runtime]\nhooks_dir = [\"/main\"]\n",
			"etc/crio/crio.conf.d/00-first": "[crio.runtime]\nhooks_dir = [\"/dropin\"]\n",
		}, true, "/dropin", "00-first"},
		{"subdirectory walked", map[string]string{
			"etc/crio/crio.conf.d/10-a":  "[crio.runtime]\nhooks_dir = [\"/a\"]\n",
			"etc/crio/crio.conf.d/20/zz": "[crio.runtime]\nhooks_dir = [\"/sub\"]\n",
		}, true, "/sub", "/etc/crio/crio.conf.d/20/zz"},
		{"subdirectory walked in place", map[string]string{
			"etc/crio/crio.conf.d/10/zz": "[crio.runtime]\nhooks_dir = [\"/sub\"]\n",
			"etc/crio/crio.conf.d/2":     "[crio.runtime]\nhooks_dir = [\"/two\"]\n",
		}, true, "/two", "/etc/crio/crio.conf.d/2"},
		{"any name", map[string]string{
			"etc/crio/crio.conf.d/.hidden":  "[crio.runtime]\nhooks_dir = [\"/hidden\"]\n",
			"etc/crio/crio.conf.d/05.conf~": "[crio.runtime]\nhooks_dir = [\"/backup\"]\n",
		}, true, "/backup", "05.conf~"},
		{"hidden file", map[string]string{"etc/crio/crio.conf.d/.hidden": "[crio.runtime]\nhooks_dir = [\"/hidden\"]\n"}, true, "/hidden", ".hidden"},
		{"byte order, not numeric", map[string]string{
			"etc/crio/crio.conf.d/9-late":   "[crio.runtime]\nhooks_dir = [\"/nine\"]\n",
			"etc/crio/crio.conf.d/10-early": "[crio.runtime]\nhooks_dir = [\"/ten\"]\n",
		}, true, "/nine", "9-late"},
		{"byte order, upper case first", map[string]string{
			"etc/crio/crio.conf.d/a-lower": "[crio.runtime]\nhooks_dir = [\"/lower\"]\n",
			"etc/crio/crio.conf.d/Z-upper": "[crio.runtime]\nhooks_dir = [\"/upper\"]\n",
		}, true, "/lower", "a-lower"},
		{"empty array empties", map[string]string{
			"etc/crio/crio.conf.d/10": "[crio.runtime]\nhooks_dir = [\"/a\"]\n",
			"etc/crio/crio.conf.d/20": "[crio.runtime]\nhooks_dir = []\n",
		}, true, "", "20"},
		{"symlinked drop-in read the way the node sees it", map[string]string{
			"etc/crio/crio.conf.d/50-link": "-> /usr/lib/crio/50-shipped",
			"usr/lib/crio/50-shipped":      "[crio.runtime]\nhooks_dir = [\"/linked\"]\n",
		}, true, "/linked", "50-link"},

		// CRI-O on its built-in default: no configuration, but there.
		{"crio binary, no configuration", map[string]string{"usr/bin/crio": "binary"}, true, builtin, "built-in"},
		{"crio in /usr/local/bin, no configuration", map[string]string{"usr/local/bin/crio": "binary", "etc/crio/crio.conf.d/.keep/": ""}, true, builtin, "/usr/local/bin/crio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ReadCRIOConfig(tree(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			if c.Found != tc.found || strings.Join(c.HooksDirs, " ") != tc.dirs || !strings.Contains(c.Source, tc.from) {
				t.Errorf("got %+v, want found=%v dirs=%q source~%q", c, tc.found, tc.dirs, tc.from)
			}
		})
	}
}

// A configuration CRI-O refuses to start with is an error, not "no
// hooks_dir": the installer must not guess.
func TestReadCRIOConfigBroken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
	}{
		{"a string instead of an array", map[string]string{"etc/crio/crio.conf": "[crio.runtime]\nhooks_dir = \"/not/an/array\"\n"}},
		{"not TOML", map[string]string{"etc/crio/crio.conf.d/10": "[crio.runtime\nhooks_dir = [\"/a\"]\n"}},
		{"a key twice", map[string]string{"etc/crio/crio.conf.d/10": "[crio.runtime]\nhooks_dir = [\"/a\"]\nhooks_dir = [\"/b\"]\n"}},
		// filepath.Walk does not follow it: CRI-O reads it as a file and fails.
		{"crio.conf.d a symlink to a directory", map[string]string{"etc/crio/crio.conf.d": "-> /usr/lib/crio", "usr/lib/crio/10": "\n"}},
		// The DaemonSet mounts only /etc/crio: its target is not seen, and
		// the node's CRI-O reads it (taken as absent before).
		{"crio.conf a symlink out of sight", map[string]string{"etc/crio/crio.conf": "-> /usr/share/crio/crio.conf", "usr/bin/crio": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := ReadCRIOConfig(tree(t, tc.files)); err == nil {
				t.Errorf("no error: %+v", c)
			}
		})
	}
}

// CRI-O's socket without any configuration file or binary in the places
// looked at (a CRI-O run from elsewhere): still CRI-O, on its default.
// /var/run is a symlink to /run, resolved inside the root.
func TestReadCRIOConfigSocket(t *testing.T) {
	root := tree(t, map[string]string{"var/run": "-> /run"})
	if err := os.MkdirAll(filepath.Join(root, "run/crio"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(root, "run/crio/crio.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := ReadCRIOConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Found || strings.Join(c.HooksDirs, " ") != builtin || !strings.Contains(c.Source, "crio.sock") {
		t.Errorf("CRI-O socket, no configuration: %+v", c)
	}
	err = c.Check("/etc/containers/oci/hooks.d")
	if !errors.Is(err, ErrNotRead) || !strings.Contains(err.Error(), "it reads only "+builtin) {
		t.Errorf("check of /etc on CRI-O's defaults: %v", err)
	}
}

// On the node itself (root "/"), `crio config` says what CRI-O reads: its
// output is TOML, read the same way. A fake crio on PATH stands in.
func TestNodeCRIOCrioConfig(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\n[ \"$1\" = config ] || exit 3\necho 'level=info msg=\"Starting CRI-O\"' >&2\ncat <<'EOF'\n" +
		"[crio.runtime]\n  hooks_dir = [\n    \"/etc/containers/oci/hooks.d\", \"/odd]name\",\n  ]\n[crio.image]\n  pause_image = \"x\"\nEOF\n"
	if err := os.WriteFile(filepath.Join(bin, "crio"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/bin:/bin")
	// The node's processes: none here, then a crio run with --hooks-dir
	// (which `crio config`, another crio, does not know).
	old := nodeProc
	t.Cleanup(func() { nodeProc = old })
	nodeProc = t.TempDir()
	c, err := NodeCRIO(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Found || strings.Join(c.HooksDirs, " ") != "/etc/containers/oci/hooks.d /odd]name" || !strings.Contains(c.Source, "crio config") {
		t.Errorf("crio config: %+v", c)
	}
	nodeProc = tree(t, map[string]string{
		"proc/1/comm": "systemd\n", "proc/1/ns/mnt": "-> mnt:[1]",
		"proc/77/comm": "crio\n", "proc/77/ns/mnt": "-> mnt:[1]", "proc/77/cmdline": "/usr/bin/crio\x00--hooks-dir=/run/h\x00",
	})
	c, err = NodeCRIO(context.Background(), "/")
	if err != nil || strings.Join(c.HooksDirs, " ") != "/run/h" || !strings.Contains(c.Source, "--hooks-dir of the running crio (pid 77)") {
		t.Errorf("crio config, crio running with --hooks-dir: %+v, %v", c, err)
	}

	if err := os.WriteFile(filepath.Join(bin, "crio"), []byte("#!/bin/sh\necho 'bad config' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c, err := NodeCRIO(context.Background(), "/"); err == nil || !strings.Contains(err.Error(), "bad config") {
		t.Errorf("failing crio config: %+v, %v (want an error with its stderr)", c, err)
	}
}

func TestCheckSaysWhatToUse(t *testing.T) {
	for _, files := range []map[string]string{
		{"etc/crio/crio.conf": upstreamConf},
		{"usr/bin/crio": "binary"},
	} {
		c, err := ReadCRIOConfig(tree(t, files))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Check("/etc/containers/oci/hooks.d")
		if !errors.Is(err, ErrNotRead) || !strings.Contains(err.Error(), "it reads only "+builtin) {
			t.Errorf("check of /etc on upstream CRI-O (%v): %v", files, err)
		}
		if err := c.Check(builtin + "/"); err != nil {
			t.Errorf("check of the default: %v", err)
		}
	}
}

// Without configuration, socket or binary in a standard directory, a crio
// on PATH (looked up inside the root) is CRI-O on its default.
func TestReadCRIOConfigPath(t *testing.T) {
	root := tree(t, map[string]string{"opt/crio/bin/crio": "binary"})
	t.Setenv("PATH", "relative/bin:/opt/crio/bin:/usr/bin")
	c, err := ReadCRIOConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Found || strings.Join(c.HooksDirs, " ") != builtin || !strings.Contains(c.Source, "/opt/crio/bin/crio") {
		t.Errorf("crio on PATH: %+v", c)
	}
	t.Setenv("PATH", "/usr/bin")
	if c, err := ReadCRIOConfig(root); err != nil || c.Found {
		t.Errorf("crio off PATH: %+v, %v (want not found)", c, err)
	}
}

// A running crio is looked for in ROOT/proc (a stand-in tree here; the
// real process is in tests/packaging): its name alone is not enough, it
// must share the mount namespace of the node's pid 1; its --hooks-dir is
// what it reads; a --config elsewhere cannot be checked.
func TestReadCRIOConfigProcess(t *testing.T) {
	procEnv := func(comm, ns, cmdline, environ string) map[string]string {
		return map[string]string{
			"proc/1/comm": "systemd\n", "proc/1/ns/mnt": "-> mnt:[1]", "proc/1/cmdline": "/sbin/init\x00",
			"proc/4242/comm": comm, "proc/4242/ns/mnt": "-> " + ns, "proc/4242/cmdline": cmdline, "proc/4242/environ": environ,
		}
	}
	proc := func(comm, ns, cmdline string) map[string]string {
		return procEnv(comm, ns, cmdline, "PATH=/usr/bin\x00")
	}
	// withProc adds another crio process, in the node's mount namespace.
	withProc := func(files map[string]string, pid, cmdline string) map[string]string {
		files["proc/"+pid+"/comm"], files["proc/"+pid+"/ns/mnt"], files["proc/"+pid+"/cmdline"] = "crio\n", "-> mnt:[1]", cmdline
		files["proc/"+pid+"/environ"] = "PATH=/usr/bin\x00"
		return files
	}
	withConf := proc("crio\n", "mnt:[1]", "/usr/bin/crio\x00--hooks-dir\x00/run/h\x00")
	withConf["etc/crio/crio.conf"] = "[crio.runtime]\nhooks_dir = [\"/etc/containers/oci/hooks.d\"]\n"
	for _, tc := range []struct {
		name    string
		files   map[string]string
		found   bool
		dirs    string
		source  string
		errText string
	}{
		{name: "crio on its default", files: proc("crio\n", "mnt:[1]", "/opt/crio\x00--log-level\x00info\x00"), found: true, dirs: builtin, source: "crio running (pid 4242)"},
		{name: "crio with --hooks-dir", files: proc("crio\n", "mnt:[1]", "/opt/crio\x00--hooks-dir\x00/etc/h\x00--hooks-dir=/run/h/\x00"), found: true, dirs: "/etc/h /run/h", source: "--hooks-dir of the running crio (pid 4242)"},
		{name: "crio with --config", files: proc("crio\n", "mnt:[1]", "/opt/crio\x00-config\x00/opt/crio.conf\x00"), found: true, dirs: builtin, errText: "--config /opt/crio.conf"},
		{name: "crio with one comma-separated --hooks-dir", files: proc("crio\n", "mnt:[1]", "/opt/crio\x00--hooks-dir=/etc/h, /run/h\x00"), found: true, dirs: "/etc/h /run/h", source: "--hooks-dir of the running crio"},
		{name: "crio with CONTAINER_HOOKS_DIR", files: procEnv("crio\n", "mnt:[1]", "/opt/crio\x00", "A=1\x00CONTAINER_HOOKS_DIR=/etc/h,/run/h\x00"), found: true, dirs: "/etc/h /run/h", source: "CONTAINER_HOOKS_DIR of the running crio (pid 4242)"},
		{name: "--hooks-dir over CONTAINER_HOOKS_DIR", files: procEnv("crio\n", "mnt:[1]", "/opt/crio\x00--hooks-dir\x00/etc/h\x00", "CONTAINER_HOOKS_DIR=/run/h\x00"), found: true, dirs: "/etc/h", source: "--hooks-dir"},
		// CRI-O's command line wins over its files (read before, taken as
		// they said before).
		{name: "--hooks-dir over crio.conf", files: withConf, found: true, dirs: "/run/h", source: "--hooks-dir of the running crio"},
		{name: "crio with --config at its default", files: proc("crio\n", "mnt:[1]", "/opt/crio\x00-c\x00/etc/crio/crio.conf\x00"), found: true, dirs: builtin, source: "crio running"},
		{name: "crio with CONTAINER_CONFIG_DIR", files: procEnv("crio\n", "mnt:[1]", "/opt/crio\x00", "CONTAINER_CONFIG_DIR=/opt/crio.d\x00"), found: true, dirs: builtin, errText: "CONTAINER_CONFIG_DIR /opt/crio.d"},
		{name: "a pod's process named crio", files: proc("crio\n", "mnt:[2]", "crio\x00"), dirs: builtin},
		{name: "another process", files: proc("conmon\n", "mnt:[1]", "conmon\x00"), dirs: builtin},
		// A `crio status` listed first (a lower pid) is not the daemon:
		// its settings were taken, the daemon's --hooks-dir missed.
		{name: "crio status before the daemon", files: withProc(proc("crio\n", "mnt:[1]", "/usr/bin/crio\x00--hooks-dir\x00/run/h\x00"),
			"300", "/usr/bin/crio\x00--config\x00/etc/other.conf\x00status\x00"), found: true, dirs: "/run/h", source: "pid 4242"},
		{name: "crio config before the daemon", files: withProc(proc("crio\n", "mnt:[1]", "/usr/bin/crio\x00--log-level\x00info\x00"),
			"300", "crio\x00config\x00"), found: true, dirs: builtin, source: "pid 4242"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ReadCRIOConfig(tree(t, tc.files))
			if tc.errText != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err %v, want one naming %q", err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Found != tc.found || strings.Join(c.HooksDirs, " ") != tc.dirs || !strings.Contains(c.Source, tc.source) {
				t.Errorf("%+v, want found %t, dirs %q, source with %q", c, tc.found, tc.dirs, tc.source)
			}
		})
	}
}
