package hookinstall

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Files says what goes where. Paths are the node's (absolute); Root is
// where the node's "/" is seen.
type Files struct {
	Root     string
	BinDir   string
	HooksDir string
	// Binary is the hook binary's content, installed as BinaryName.
	Binary     []byte
	BinaryName string
	// JSON is the hooks.d file's content, installed as JSONName.
	JSON     []byte
	JSONName string
	// Owner, if set, is a node file whose presence says that another
	// installer put the binary and the JSON on this node and owns them:
	// Uninstall then removes neither. The OpenShift MachineConfig route
	// writes the JSON and its unit's environment file from the
	// MachineConfig and installs the binary at every boot; the sidecar
	// route installs the same names, often the same bytes, so neither
	// their content nor who wrote them last tells the routes apart, and a
	// sidecar stopped after the MachineConfig came took the hook off the
	// node until its next reboot (and the JSON the MachineConfig manages).
	// Install writes neither while it exists: a JSON of another version
	// written over the MachineConfig's is drift the Machine Config
	// Operator marks the node degraded for, which stalls its pool.
	Owner string
}

// ErrOwnedElsewhere is Install's and Uninstall's error when Files.Owner
// exists: they wrote or removed nothing.
var ErrOwnedElsewhere = errors.New("owned by another installer")

// owned returns ErrOwnedElsewhere (wrapped) while f.Owner exists, and an
// error when that cannot be told (the files are then left alone too).
func (f Files) owned() error {
	if f.Owner == "" {
		return nil
	}
	owned, err := exists(f.Root, f.Owner)
	if err != nil {
		return err
	}
	if owned {
		return fmt.Errorf("%s exists: %w", f.Owner, ErrOwnedElsewhere)
	}
	return nil
}

// OwnerUnseen tells whether f.Owner's directory cannot be seen inside a
// Root other than "/" (a container that was not given the node's
// /etc/iptables-alerter): the owner file's absence then says nothing, and
// Install would write over another installer's files. Under "/" a missing
// directory is a missing file.
func (f Files) OwnerUnseen() bool {
	if f.Owner == "" || filepath.Clean(f.Root) == "/" {
		return false
	}
	fd, err := openDir(f.Root, filepath.Dir(filepath.Clean(f.Owner)), false)
	if err != nil {
		return true
	}
	unix.Close(fd)
	return false
}

// Missing names the node paths of the binary and the JSON that are not
// there (or cannot be looked at): on a node whose files another installer
// owns, what that installer has not put in place.
func (f Files) Missing() []string {
	var out []string
	for _, p := range []string{filepath.Join(f.BinDir, f.BinaryName), filepath.Join(f.HooksDir, f.JSONName)} {
		if ok, err := exists(f.Root, p); !ok || err != nil {
			out = append(out, p)
		}
	}
	return out
}

// Install writes the binary, then the JSON. With no JSON (a node where no
// runtime reads hooks.d) it writes only the binary. While f.Owner exists
// it writes nothing and returns ErrOwnedElsewhere.
func Install(f Files) error {
	if err := f.validate(); err != nil {
		return err
	}
	if err := f.owned(); err != nil {
		return err
	}
	if err := writeFile(f.Root, f.BinDir, f.BinaryName, f.Binary, 0o755); err != nil {
		return err
	}
	if f.JSON == nil {
		return nil
	}
	return writeFile(f.Root, f.HooksDir, f.JSONName, f.JSON, 0o644)
}

// Uninstall removes the JSON, syncs its directory, then removes the
// binary. Files already gone are not an error. While f.Owner exists it
// removes nothing and returns ErrOwnedElsewhere.
func Uninstall(f Files) error {
	if err := f.validate(); err != nil {
		return err
	}
	if err := f.owned(); err != nil {
		return err
	}
	if err := removeFile(f.Root, f.HooksDir, f.JSONName); err != nil {
		return err
	}
	return removeFile(f.Root, f.BinDir, f.BinaryName)
}

func (f Files) validate() error {
	for _, d := range []string{f.BinDir, f.HooksDir} {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("check directory %q: not an absolute path", d)
		}
	}
	if f.Owner != "" && (!filepath.IsAbs(f.Owner) || filepath.Clean(f.Owner) == "/") {
		return fmt.Errorf("check owner file %q: not an absolute path to a file", f.Owner)
	}
	// The binary directory is written into the hooks.d JSON's /bin/sh
	// command line and into a JSON string: only characters that need no
	// quoting in either, as the Makefile's BINDIR check.
	if strings.IndexFunc(f.BinDir, func(r rune) bool { return !safePathRune(r) }) >= 0 {
		return fmt.Errorf("check directory %q: may hold only A-Za-z0-9/._+-", f.BinDir)
	}
	for _, n := range []string{f.BinaryName, f.JSONName} {
		if n == "" || strings.ContainsRune(n, '/') || n == "." || n == ".." {
			return fmt.Errorf("check file name %q: not a plain name", n)
		}
	}
	return nil
}

func safePathRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._+-", r)
}

// BinaryPath rewrites the hooks.d JSON for a binary directory: the shipped
// file names /usr/local/bin/, as the Makefile's sed does.
func BinaryPath(json []byte, binDir string) []byte {
	return bytes.ReplaceAll(json, []byte("/usr/local/bin/"), []byte(strings.TrimSuffix(binDir, "/")+"/"))
}

// openDir opens dir (a node path) inside root, creating missing
// directories 0755 when create is set.
func openDir(root, dir string, create bool) (int, error) {
	rfd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open root %q: %w", root, &os.PathError{Op: "open", Path: root, Err: err})
	}
	defer unix.Close(rfd)
	how := &unix.OpenHow{Flags: unix.O_DIRECTORY | unix.O_RDONLY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	rel := strings.TrimPrefix(filepath.Clean(dir), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(rfd, rel, how)
	if err == nil || !errors.Is(err, unix.ENOENT) || !create {
		if err != nil {
			return -1, fmt.Errorf("open directory %q in %q: %w", dir, root, &os.PathError{Op: "openat2", Path: dir, Err: err})
		}
		return fd, nil
	}
	// Create one component at a time, each resolved inside the root.
	prefix := ""
	for _, c := range strings.Split(rel, "/") {
		prefix = filepath.Join(prefix, c)
		pfd, err := unix.Openat2(rfd, filepath.Dir(prefix), how)
		if err != nil {
			return -1, fmt.Errorf("open directory %q in %q: %w", filepath.Dir("/"+prefix), root, err)
		}
		err = unix.Mkdirat(pfd, c, 0o755)
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("create directory %q in %q: %w", "/"+prefix, root, err)
		}
	}
	fd, err = unix.Openat2(rfd, rel, how)
	if err != nil {
		return -1, fmt.Errorf("open directory %q in %q: %w", dir, root, err)
	}
	return fd, nil
}

// writeFile puts data at dir/name with mode, by rename from a temporary
// name, unless the file already holds exactly that.
func writeFile(root, dir, name string, data []byte, mode uint32) error {
	dfd, err := openDir(root, dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if same(dfd, name, data, mode) {
		return nil
	}
	// Not ending in ".json": CRI-O's hooks.d watcher ignores it. Random,
	// not the pid: two installers in containers are both pid 1, and one
	// would rename the other's half-written file into place.
	tmp := "." + name + ".tmp" + rand.Text()
	removeTemps(dfd, name)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %q in %q: %w", tmp, dir, err)
	}
	fl := os.NewFile(uintptr(fd), tmp)
	_, err = fl.Write(data)
	if err == nil {
		err = unix.Fchmod(fd, mode)
	}
	if err == nil {
		err = fl.Sync()
	}
	if cerr := fl.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write %q in %q: %w", name, dir, err)
	}
	if err := unix.Fsync(dfd); err != nil {
		return fmt.Errorf("sync directory %q: %w", dir, err)
	}
	return nil
}

// same reports whether dir/name is a regular file with exactly data and mode.
func same(dfd int, name string, data []byte, mode uint32) bool {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	fl := os.NewFile(uintptr(fd), name)
	defer fl.Close()
	st, err := fl.Stat()
	if err != nil || !st.Mode().IsRegular() || uint32(st.Mode().Perm()) != mode || st.Size() != int64(len(data)) {
		return false
	}
	// In pieces: the binary is held once already, and the installer's
	// sidecar has a small memory limit.
	buf := make([]byte, 64<<10)
	for len(data) > 0 {
		n, err := io.ReadFull(fl, buf[:min(len(buf), len(data))])
		if err != nil || !bytes.Equal(buf[:n], data[:n]) {
			return false
		}
		data = data[n:]
	}
	n, _ := fl.Read(buf[:1])
	return n == 0
}

// exists reports whether the node path (a file of any type, a link not
// followed) is there, seen inside root.
func exists(root, path string) (bool, error) {
	path = filepath.Clean(path)
	dfd, err := openDir(root, filepath.Dir(path), false)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	err = unix.Fstatat(dfd, filepath.Base(path), &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look for %q in %q: %w", path, root, err)
	}
	return true, nil
}

// removeFile unlinks dir/name and syncs dir, so the removal is durable
// before the next step.
func removeFile(root, dir, name string) error {
	dfd, err := openDir(root, dir, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %q in %q: %w", name, dir, err)
	}
	if err := unix.Fsync(dfd); err != nil {
		return fmt.Errorf("sync directory %q: %w", dir, err)
	}
	return nil
}

// staleTemp is the age past which a temporary file is an installer's
// killed mid-write: a live one writes its file in seconds.
const staleTemp = 10 * time.Minute

// removeTemps removes the temporary files of name that an installer
// killed mid-write left behind (any installer: the pod that wrote them is
// gone), older than staleTemp so as not to pull one from under another
// installer writing it now.
func removeTemps(dfd int, name string) {
	ents, err := os.ReadDir("/proc/self/fd/" + strconv.Itoa(dfd))
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "."+name+".tmp") || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTemp {
			_ = unix.Unlinkat(dfd, e.Name(), 0)
		}
	}
}
