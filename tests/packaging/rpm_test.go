package packaging

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/inotifytest"
	"github.com/iptables-alerter/iptables-alerter/internal/nstest"
)

// rpmFiles is exactly what the package holds.
var rpmFiles = []string{
	"/etc/iptables-alerter",
	"/etc/iptables-alerter/allowlist.json",
	"/usr/bin/iptables-alerter",
	"/usr/bin/iptables-alerter-hook",
	"/usr/lib/systemd/system/iptables-alerter-agent.service",
	"/usr/lib/systemd/system/iptables-alerter-textfile-once.service",
	"/usr/lib/systemd/system/iptables-alerter-textfile-once.timer",
	"/usr/lib/systemd/system/iptables-alerter-textfile.service",
	"/usr/share/containers/oci/hooks.d/iptables-alerter.json",
	"/usr/share/licenses/iptables-alerter",
	"/usr/share/licenses/iptables-alerter/LICENSE",
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// `make rpm` (of the committed HEAD), its file list, and an install and
// erase with the real rpm in a scratch root.
func TestRPM(t *testing.T) {
	nstest.NeedRoot(t, "rpmbuild", "rpm", "git")
	dir := t.TempDir()
	run(t, "make", "-C", repo(t), "rpm", "RPMDIR="+dir+"/rpmbuild", "RPM_VERSION=9.9.9")
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

	root := filepath.Join(dir, "root")
	run(t, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "--initdb")
	// rpm writes its payload in path order and erases in reverse: the
	// binary (/usr/bin) lands before the JSON (/usr/share) and goes after it.
	binDir, hooksDir := filepath.Join(root, "usr/bin"), filepath.Join(root, "usr/share/containers/oci/hooks.d")
	for _, d := range []string{binDir, hooksDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := inotifytest.New(t, binDir, hooksDir)
	// --nodeps: the scratch root has no /bin/sh for rpm's automatic requires.
	run(t, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "-i", "--nodeps", pkgs[0])
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

	run(t, "rpm", "--root", root, "--dbpath", "/var/lib/rpm", "-e", "iptables-alerter")
	if got := inotifytest.On(w.Read(), "iptables-alerter-hook", "iptables-alerter.json"); strings.Join(got, "; ") != "hooks.d delete iptables-alerter.json; bin delete iptables-alerter-hook" {
		t.Errorf("rpm -e events on the hook's files: %q, want the JSON deleted, then the binary", got)
	}
	// rpm leaves the parent directories it created but does not own (empty);
	// no file may remain outside its own database.
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, root)
		if d.IsDir() && (rel == "/var/lib/rpm" || rel == "/usr/lib/sysimage/rpm" || rel == "/var/lib/rpm-state") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
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
