package packaging

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/inotifytest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// rpmFiles is exactly what the package holds.
var rpmFiles = append([]string{
	"/etc/iptables-alerter",
	"/etc/iptables-alerter/allowlist.json",
	"/usr/bin/iptables-alerter",
	"/usr/bin/iptables-alerter-agent",
	"/usr/bin/iptables-alerter-hook",
	"/usr/lib/systemd/system/iptables-alerter-agent.service",
	"/usr/lib/systemd/system/iptables-alerter-textfile-once.service",
	"/usr/lib/systemd/system/iptables-alerter-textfile-once.timer",
	"/usr/lib/systemd/system/iptables-alerter-textfile.service",
	"/usr/share/containers/oci/hooks.d/iptables-alerter.json",
	"/usr/share/doc/iptables-alerter",
	"/usr/share/doc/iptables-alerter/README.md",
	"/usr/share/doc/iptables-alerter/agent.md",
	"/usr/share/doc/iptables-alerter/allowlist.md",
	"/usr/share/doc/iptables-alerter/consumers-forward.md",
	"/usr/share/doc/iptables-alerter/consumers-textfile.md",
	"/usr/share/doc/iptables-alerter/install-rpm.md",
	"/usr/share/licenses/iptables-alerter",
	"/usr/share/licenses/iptables-alerter/LICENSE",
}, manPages()...)

// manPages is every page under docs/man, where the package puts it.
func manPages() []string {
	_, file, _, _ := runtime.Caller(0)
	pages, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "..", "..", "docs", "man", "*.8"))
	var out []string
	for _, p := range pages {
		out = append(out, "/usr/share/man/man8/"+filepath.Base(p)+".gz")
	}
	return out
}

// unitNames are the units the scriptlets preset, restart and stop.
const unitNames = "iptables-alerter-agent.service iptables-alerter-textfile.service iptables-alerter-textfile-once.service iptables-alerter-textfile-once.timer"

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// `make rpm` (of the committed HEAD), its file list, rpmlint, and an
// install, a reinstall (an upgrade to the scriptlets) and an erase with
// the real rpm in a scratch root whose systemctl records what the
// scriptlets ask of it.
func TestRPM(t *testing.T) {
	nstest.NeedRoot(t, "rpmbuild", "rpm", "git", "busybox")
	dir := t.TempDir()
	// --nodeps: Debian's rpm database holds none of the BuildRequires.
	run(t, "make", "-C", repo(t), "rpm", "RPMDIR="+dir+"/rpmbuild", "RPM_VERSION=9.9.9", "RPMBUILDFLAGS=--nodeps")
	pkgs, _ := filepath.Glob(dir + "/rpmbuild/RPMS/*/iptables-alerter-9.9.9-*.rpm")
	if len(pkgs) != 1 {
		t.Fatalf("make rpm gave %v", pkgs)
	}
	if got := strings.Fields(run(t, "rpm", "-qlp", pkgs[0])); strings.Join(got, "\n") != strings.Join(rpmFiles, "\n") {
		t.Errorf("rpm -qlp:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(rpmFiles, "\n"))
	}
	if got := run(t, "rpm", "-qp", "--qf", "%{LICENSE}", pkgs[0]); got != "Apache-2.0" {
		t.Errorf("rpm License: %q, want Apache-2.0", got)
	}
	if got := run(t, "rpm", "-qp", "--changelog", pkgs[0]); !strings.Contains(got, "- 9.9.9-1\n") {
		t.Errorf("rpm changelog does not name 9.9.9-1:\n%s", got)
	}
	t.Run("rpmlint", func(t *testing.T) {
		_, err := exec.LookPath("rpmlint")
		nstest.Need(t, err == nil, "needs rpmlint (apt-get install rpmlint)")
		// Only what packaging/rpm/rpmlint.toml lets pass, each with its reason.
		out, _ := exec.Command("rpmlint", "-c", filepath.Join(repo(t), "packaging/rpm/rpmlint.toml"),
			pkgs[0], filepath.Join(repo(t), "packaging/rpm/iptables-alerter.spec")).CombinedOutput()
		if !strings.Contains(string(out), " 0 errors, 0 warnings, 0 badness") {
			t.Errorf("rpmlint:\n%s", out)
		}
	})

	root := filepath.Join(dir, "root")
	run(t, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "--initdb")
	// The scriptlets run chrooted: a shell, /dev/null, and a systemctl
	// that logs.
	shell := []string{"/bin/sh", "/dev/null", "/usr/bin/systemctl", "/systemctl.log"}
	for _, d := range []string{"bin", "dev", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/sh"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/systemctl"), []byte("#!/bin/sh\necho \"$*\" >>/systemctl.log\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	systemctl := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "systemctl.log"))
		_ = os.Remove(filepath.Join(root, "systemctl.log"))
		return strings.TrimSpace(string(b))
	}
	// rpm writes its payload in path order and erases in reverse: the
	// binary (/usr/bin) lands before the JSON (/usr/share) and goes after it.
	binDir, hooksDir := filepath.Join(root, "usr/bin"), filepath.Join(root, "usr/share/containers/oci/hooks.d")
	for _, d := range []string{binDir, hooksDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := inotifytest.New(t, binDir, hooksDir)
	// --nodeps: the scratch root's database does not list /bin/sh.
	run(t, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "-i", "--nodeps", pkgs[0])
	if got, want := systemctl(), "--no-reload preset "+unitNames; got != want {
		t.Errorf("install: systemctl %q, want %q (preset, nothing started)", got, want)
	}
	if got := inotifytest.On(w.Read(), "iptables-alerter-hook", "iptables-alerter.json"); strings.Join(got, "; ") != "bin moved_to iptables-alerter-hook; hooks.d moved_to iptables-alerter.json" {
		t.Errorf("rpm -i events on the hook's files: %q, want the binary renamed in, then the JSON", got)
	}
	for _, f := range rpmFiles[1:] {
		st, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Errorf("installed file: %v", err)
			continue
		}
		if st.IsDir() {
			continue
		}
		want := os.FileMode(0o644)
		if strings.HasPrefix(f, "/usr/bin/") {
			want = 0o755
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", f, st.Mode(), want)
		}
	}
	js, _ := os.ReadFile(filepath.Join(root, "usr/share/containers/oci/hooks.d/iptables-alerter.json"))
	if !bytes.Contains(js, []byte("/usr/bin/iptables-alerter-hook")) || bytes.Contains(js, []byte("/usr/local/bin/iptables-alerter")) {
		t.Errorf("hooks.d JSON does not name /usr/bin/iptables-alerter-hook:\n%s", js)
	}
	unit, _ := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/iptables-alerter-textfile.service"))
	if !bytes.Contains(unit, []byte("ExecStart=/usr/bin/iptables-alerter textfile")) {
		t.Errorf("unit does not run /usr/bin/iptables-alerter:\n%s", unit)
	}

	// The same package again: rpm runs the scriptlets as for an upgrade.
	run(t, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "-U", "--replacepkgs", "--nodeps", pkgs[0])
	w.Read()
	if got, want := systemctl(), "try-restart "+unitNames; got != want {
		t.Errorf("upgrade: systemctl %q, want %q (the running units onto the new binary)", got, want)
	}

	run(t, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "-e", "iptables-alerter")
	if got, want := systemctl(), "--no-reload disable --now "+unitNames; got != want {
		t.Errorf("erase: systemctl %q, want %q (stopped before the files go)", got, want)
	}
	if got := inotifytest.On(w.Read(), "iptables-alerter-hook", "iptables-alerter.json"); strings.Join(got, "; ") != "hooks.d delete iptables-alerter.json; bin delete iptables-alerter-hook" {
		t.Errorf("rpm -e events on the hook's files: %q, want the JSON deleted, then the binary", got)
	}
	// rpm leaves the parent directories it created but does not own (empty);
	// no file may remain outside its own database.
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, root)
		if d.IsDir() && (rel == "/var/lib/rpm" || rel == "/usr/lib/sysimage/rpm" || rel == "/var/lib/rpm-state") {
			return filepath.SkipDir
		}
		if !d.IsDir() && !slices.Contains(shell, rel) {
			t.Errorf("left behind after rpm -e: %s", rel)
		}
		if d.IsDir() && rel == "/etc/iptables-alerter" {
			t.Errorf("left behind after rpm -e: %s/", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRPMGoVersion: the spec asks for the Go go.mod names, so a build
// system never has to fetch a newer toolchain (it is offline).
func TestRPMGoVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(repo(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile(filepath.Join(repo(t), "packaging/rpm/iptables-alerter.spec"))
	if err != nil {
		t.Fatal(err)
	}
	var goLine string
	for _, l := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goLine = strings.TrimSpace(v)
		}
	}
	if want := "BuildRequires:  golang >= " + goLine + "\n"; goLine == "" || !bytes.Contains(spec, []byte(want)) {
		t.Errorf("the spec has no %q (go.mod: go %s)", strings.TrimSpace(want), goLine)
	}
}
