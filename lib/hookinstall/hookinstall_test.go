package hookinstall

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/inotifytest"
)

func files(root string) Files {
	return Files{Root: root, BinDir: "/usr/local/bin", HooksDir: "/etc/containers/oci/hooks.d",
		Binary: bytes.Repeat([]byte("\x7fELF binary "), 100000), BinaryName: "iptables-alerter-hook",
		JSON: []byte(`{"hook":{"path":"/usr/local/bin/iptables-alerter-hook"}}`), JSONName: "iptables-alerter.json"}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	return st.Mode()
}

func TestInstallModesAndIdempotence(t *testing.T) {
	root := t.TempDir()
	f := files(root)
	// What an installer killed mid-write leaves: removed by the next one.
	stale := filepath.Join(root, "usr/local/bin/.iptables-alerter-hook.tmp999999")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	// Another installer's, being written now: left to it.
	live := filepath.Join(root, "usr/local/bin/.iptables-alerter-hook.tmpLIVE")
	if err := os.WriteFile(live, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Install(f); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file left: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("another installer's temporary file, being written, removed: %v", err)
	}
	if err := os.Remove(live); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "usr/local/bin/iptables-alerter-hook")
	js := filepath.Join(root, "etc/containers/oci/hooks.d/iptables-alerter.json")
	if m := mode(t, bin); m != 0o755 {
		t.Errorf("binary mode %v, want -rwxr-xr-x", m)
	}
	if m := mode(t, js); m != 0o644 {
		t.Errorf("JSON mode %v, want -rw-r--r--", m)
	}
	if m := mode(t, filepath.Join(root, "etc/containers")); m != os.ModeDir|0o755 {
		t.Errorf("created directory mode %v, want drwxr-xr-x", m)
	}
	if got, _ := os.ReadFile(bin); !bytes.Equal(got, f.Binary) {
		t.Errorf("binary content differs")
	}
	before := map[string]os.FileInfo{}
	for _, p := range []string{bin, js} {
		before[p], _ = os.Stat(p)
	}
	time.Sleep(10 * time.Millisecond)
	if err := Install(f); err != nil {
		t.Fatal(err)
	}
	for p, st := range before {
		now, _ := os.Stat(p)
		if !os.SameFile(st, now) || !now.ModTime().Equal(st.ModTime()) {
			t.Errorf("%s rewritten by a second identical install", p)
		}
	}
	// A changed binary replaces the old one (a new inode: a running hook
	// keeps its own), and a wrong mode is put right.
	f.Binary = []byte("new")
	if err := os.Chmod(js, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Install(f); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(bin); string(got) != "new" {
		t.Errorf("binary not updated: %q", got)
	}
	if m := mode(t, js); m != 0o644 {
		t.Errorf("JSON mode %v not put right", m)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "usr/local/bin"))
	if len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
}

// On RHCOS /usr/local is a symlink to /var/usrlocal: followed inside the
// root, never to the machine's own /var.
func TestInstallSymlinksStayInRoot(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var/usrlocal/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/var/usrlocal", filepath.Join(root, "usr/local")); err != nil {
		if err := os.MkdirAll(filepath.Join(root, "usr"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/var/usrlocal", filepath.Join(root, "usr/local")); err != nil {
			t.Fatal(err)
		}
	}
	// A hooks dir pointing far outside: resolved inside the root.
	for _, d := range []string{"etc/containers/oci", "hooks-escape"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../../../../../../hooks-escape", filepath.Join(root, "etc/containers/oci/hooks.d")); err != nil {
		t.Fatal(err)
	}
	if err := Install(files(root)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "var/usrlocal/bin/iptables-alerter-hook")); err != nil {
		t.Errorf("binary not under the root's /var/usrlocal: %v", err)
	}
	if _, err := os.Stat("/var/usrlocal/bin/iptables-alerter-hook"); err == nil {
		t.Errorf("binary escaped to the machine's /var/usrlocal")
	}
	if _, err := os.Stat(filepath.Join(root, "hooks-escape/iptables-alerter.json")); err != nil {
		t.Errorf("JSON not at the root's /hooks-escape: %v", err)
	}
	// A symlink planted at the final name is replaced, not followed.
	target := filepath.Join(t.TempDir(), "victim")
	js := filepath.Join(root, "hooks-escape/iptables-alerter.json")
	_ = os.Remove(js)
	if err := os.Symlink(target, js); err != nil {
		t.Fatal(err)
	}
	if err := Install(files(root)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("install wrote through a symlink: %v", err)
	}
	if m := mode(t, js); !m.IsRegular() {
		t.Errorf("JSON is %v, want a regular file", m)
	}
}

// The final names appear only by rename (never created or written in
// place), the binary before the JSON; uninstall deletes the JSON first.
func TestOrderAndNoPartialFile(t *testing.T) {
	root := t.TempDir()
	f := files(root)
	bin, hooks := filepath.Join(root, "usr/local/bin"), filepath.Join(root, "etc/containers/oci/hooks.d")
	for _, d := range []string{bin, hooks} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// An old binary in place, as on an upgrade.
	if err := os.WriteFile(filepath.Join(bin, f.BinaryName), []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := inotifytest.New(t, bin, hooks)
	if err := Install(f); err != nil {
		t.Fatal(err)
	}
	final := inotifytest.On(w.Read(), f.BinaryName, f.JSONName)
	want := []string{"bin moved_to iptables-alerter-hook", "hooks.d moved_to iptables-alerter.json"}
	if strings.Join(final, "; ") != strings.Join(want, "; ") {
		t.Errorf("install events on the final names: %q, want %q", final, want)
	}
	if err := Uninstall(f); err != nil {
		t.Fatal(err)
	}
	got := w.Read()
	want = []string{"hooks.d delete iptables-alerter.json", "bin delete iptables-alerter-hook"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("uninstall events %q, want %q", got, want)
	}
	// Again, with everything gone, and with the directories gone.
	if err := Uninstall(f); err != nil {
		t.Errorf("second uninstall: %v", err)
	}
	if err := Uninstall(files(t.TempDir())); err != nil {
		t.Errorf("uninstall on an empty root: %v", err)
	}
}

func TestInstallRejectsBadPaths(t *testing.T) {
	for _, mod := range []func(*Files){
		func(f *Files) { f.BinDir = "usr/bin" },
		func(f *Files) { f.BinDir = "/opt/x; touch /tmp/pwned;" },
		func(f *Files) { f.BinDir = "/opt/$(id)" },
		func(f *Files) { f.BinDir = `/opt/"q` },
		func(f *Files) { f.HooksDir = "" },
		func(f *Files) { f.JSONName = "../x.json" },
		func(f *Files) { f.BinaryName = ".." },
	} {
		f := files(t.TempDir())
		mod(&f)
		if err := Install(f); err == nil {
			t.Errorf("install with %+v: no error", f.BinDir+" "+f.HooksDir+" "+f.JSONName+" "+f.BinaryName)
		}
	}
}

func TestBinaryPath(t *testing.T) {
	in := []byte(`{"path": "/usr/local/bin/iptables-alerter-hook", "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/bin"]}`)
	got := string(BinaryPath(in, "/usr/libexec/oci/hooks.d/"))
	want := `{"path": "/usr/libexec/oci/hooks.d/iptables-alerter-hook", "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/bin"]}`
	if got != want {
		t.Errorf("got %s", got)
	}
}

// TestSameInPieces: the installed copy is compared in 64 KiB pieces (the
// sidecar's memory limit), so a difference in any piece, or a longer or
// shorter file, still counts.
func TestSameInPieces(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320,000 bytes: five pieces
	dfd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	put := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "f"), b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, "f"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	put(data)
	if !same(dfd, "f", data, 0o755) {
		t.Errorf("same content: not same")
	}
	for _, at := range []int{0, 65535, 65536, len(data) - 1} {
		b := bytes.Clone(data)
		b[at] ^= 1
		put(b)
		if same(dfd, "f", data, 0o755) {
			t.Errorf("byte %d differs: same", at)
		}
	}
	put(data[:len(data)-1])
	if same(dfd, "f", data, 0o755) {
		t.Errorf("shorter file: same")
	}
}

// A node whose Owner file exists is another installer's: the OpenShift
// MachineConfig route writes the same JSON and binary names, often the
// same bytes, and a sidecar stopped after a switch to that route removed
// them. Install there writes nothing (not even another version's), and
// Uninstall leaves both; once the Owner file is gone (the MachineConfig
// deleted), Uninstall removes them as before.
func TestUninstallLeavesOwnedFiles(t *testing.T) {
	root := t.TempDir()
	f := files(root)
	f.Owner = "/etc/iptables-alerter/install.env"
	owner := filepath.Join(root, "etc/iptables-alerter/install.env")
	if err := os.MkdirAll(filepath.Dir(owner), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(owner, []byte("IPTABLES_ALERTER_IMAGE=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The MachineConfig's JSON and its unit's binary, already there.
	bin := filepath.Join(root, "usr/local/bin/iptables-alerter-hook")
	json := filepath.Join(root, "etc/containers/oci/hooks.d/iptables-alerter.json")
	for path, data := range map[string][]byte{bin: f.Binary, json: f.JSON} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// Install writes nothing over them (another version's JSON is drift
	// the Machine Config Operator degrades the node for).
	other := f
	other.Binary, other.JSON = []byte("another version"), []byte("{}")
	if err := Install(other); !errors.Is(err, ErrOwnedElsewhere) {
		t.Errorf("Install with %s there: %v, want ErrOwnedElsewhere", f.Owner, err)
	}
	for path, data := range map[string][]byte{bin: f.Binary, json: f.JSON} {
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
			t.Errorf("Install with %s there: %s changed (%v)", f.Owner, path, err)
		}
	}
	if err := Uninstall(f); !errors.Is(err, ErrOwnedElsewhere) {
		t.Errorf("Uninstall with %s there: %v, want ErrOwnedElsewhere", f.Owner, err)
	}
	for _, p := range []string{bin, json} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("Uninstall with %s there: %s: %v", f.Owner, p, err)
		}
	}
	// A link is the file's presence too: not followed, not read.
	if err := os.Remove(owner); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent", owner); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(f); !errors.Is(err, ErrOwnedElsewhere) {
		t.Errorf("Uninstall with %s a dangling link: %v, want ErrOwnedElsewhere", f.Owner, err)
	}
	if err := os.Remove(owner); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(f); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bin, json} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("Uninstall with no %s: %s still there: %v", f.Owner, p, err)
		}
	}
	if f.OwnerUnseen() {
		t.Errorf("OwnerUnseen with %s's directory there", f.Owner)
	}
	// No Owner directory at all (the sidecar's mount missing): removed,
	// and said to be unseen (the owner file could be there, not shown).
	if err := os.RemoveAll(filepath.Dir(owner)); err != nil {
		t.Fatal(err)
	}
	if !f.OwnerUnseen() {
		t.Errorf("OwnerUnseen with no %s directory under %s: false", f.Owner, root)
	}
	atRoot := f
	atRoot.Root, atRoot.Owner = "/", "/nonexistent-ipta/install.env"
	if atRoot.OwnerUnseen() {
		t.Errorf("OwnerUnseen under /: a missing directory is a missing file there")
	}
	if err := Install(f); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(f); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(json); !os.IsNotExist(err) {
		t.Errorf("Uninstall with no %s directory: the JSON is still there: %v", f.Owner, err)
	}
}

// Missing names the binary and the JSON not in place: on a node another
// installer owns, install-hook warns that the hook is absent.
func TestMissing(t *testing.T) {
	root := t.TempDir()
	f := files(root)
	bin, json := "/usr/local/bin/iptables-alerter-hook", "/etc/containers/oci/hooks.d/iptables-alerter.json"
	if got := f.Missing(); !slices.Equal(got, []string{bin, json}) {
		t.Errorf("Missing on an empty node = %q", got)
	}
	if err := Install(f); err != nil {
		t.Fatal(err)
	}
	if got := f.Missing(); got != nil {
		t.Errorf("Missing after Install = %q", got)
	}
	if err := os.Remove(filepath.Join(root, json)); err != nil {
		t.Fatal(err)
	}
	if got := f.Missing(); !slices.Equal(got, []string{json}) {
		t.Errorf("Missing without the JSON = %q", got)
	}
}
