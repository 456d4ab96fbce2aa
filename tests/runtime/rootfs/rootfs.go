// Package rootfs assembles a container root filesystem from the host's
// Debian packages (busybox-static, the iptables binaries with their
// libraries and extensions), and packs it as an OCI image archive, for
// the tests that run real runtimes without a registry.
package rootfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// No image registry is reachable from the test machines, so the container
// image is assembled from files the host's Debian packages installed:
// busybox-static for the shell and the real iptables multi-call binaries
// with the shared libraries and xtables extensions they load. It is a few
// MB of copying, fast enough to redo for every run.

var busyboxApplets = []string{"sh", "sleep", "true", "echo", "cat"}

var xtablesLinks = map[string][]string{
	"xtables-nft-multi": {"iptables", "iptables-nft", "ip6tables", "ip6tables-nft",
		"iptables-save", "iptables-nft-save", "iptables-restore", "iptables-nft-restore"},
	"xtables-legacy-multi": {"iptables-legacy", "ip6tables-legacy", "iptables-legacy-save"},
}

// FindSbin finds a host command in the sbin and bin directories, for a
// caller whose PATH lacks sbin.
func FindSbin(name string) (string, error) { return findFile(name, sbinDirs) }

// sbinDirs are searched explicitly: a non-root PATH often lacks sbin.
var sbinDirs = []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"}

// Build assembles the rootfs in dst and, as root, checks that its binaries
// run in it.
func Build(dst string) error {
	b := rootfsBuilder{dst: dst}
	return b.build()
}

type rootfsBuilder struct {
	dst string
	// elves are the copied ELF files whose libraries must follow them.
	elves []string
}

func (b *rootfsBuilder) build() error {
	for _, d := range []string{"proc", "dev", "sys", "tmp", "run", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(b.dst, d), 0o755); err != nil {
			return fmt.Errorf("create rootfs dir %q: %w", d, err)
		}
	}
	// Keep the host's merged-/usr symlinks so that every path ldd prints
	// (/lib/..., /lib64/ld-linux...) resolves the same way inside.
	for _, d := range []string{"bin", "sbin", "lib", "lib64", "lib32", "libx32"} {
		target, err := os.Readlink("/" + d)
		if err != nil {
			continue
		}
		if err := os.Symlink(target, filepath.Join(b.dst, d)); err != nil {
			return fmt.Errorf("link rootfs /%s: %w", d, err)
		}
	}

	busybox, err := findFile("busybox", []string{"/bin", "/usr/bin", "/sbin", "/usr/sbin"})
	if err != nil {
		return fmt.Errorf("find busybox (apt-get install busybox-static): %w", err)
	}
	if err := b.copyWithLinks(busybox, busyboxApplets); err != nil {
		return err
	}
	for multi, links := range xtablesLinks {
		p, err := findFile(multi, sbinDirs)
		if err != nil {
			return fmt.Errorf("find %s (apt-get install iptables): %w", multi, err)
		}
		if err := b.copyWithLinks(p, links); err != nil {
			return err
		}
	}
	// iptables dlopens its extensions by name from one directory.
	exts, _ := filepath.Glob("/usr/lib/*/xtables/*.so")
	more, _ := filepath.Glob("/usr/lib/xtables/*.so")
	exts = append(exts, more...)
	if len(exts) == 0 {
		return errors.New("find xtables extensions: none under /usr/lib/*/xtables")
	}
	for _, e := range exts {
		if err := b.copyELF(e); err != nil {
			return err
		}
	}
	if err := b.copyLibraries(); err != nil {
		return err
	}
	// iptables resolves "-p tcp" through /etc/protocols when it exists.
	if _, err := os.Stat("/etc/protocols"); err == nil {
		if _, err := b.copy("/etc/protocols"); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":  "root:x:0:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(b.dst, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write rootfs %s: %w", name, err)
		}
	}
	return b.verify()
}

// copyWithLinks copies a multi-call binary and names it by its applets, next
// to it as the Debian packages do.
func (b *rootfsBuilder) copyWithLinks(src string, links []string) error {
	if err := b.copyELF(src); err != nil {
		return err
	}
	dir := filepath.Join(b.dst, resolvedDir(src))
	for _, l := range links {
		if err := os.Symlink(filepath.Base(src), filepath.Join(dir, l)); err != nil && !os.IsExist(err) {
			return fmt.Errorf("link rootfs %s: %w", l, err)
		}
	}
	return nil
}

func (b *rootfsBuilder) copyELF(src string) error {
	if _, err := b.copy(src); err != nil {
		return err
	}
	// ldd runs on the host's file: inside the rootfs the paths would not
	// resolve yet.
	b.elves = append(b.elves, src)
	return nil
}

// copyLibraries copies every shared library ldd resolves for the copied
// files, the dynamic loader included.
func (b *rootfsBuilder) copyLibraries() error {
	libs := map[string]bool{}
	for _, f := range b.elves {
		deps, err := lddDeps(f)
		if err != nil {
			return err
		}
		for _, d := range deps {
			libs[d] = true
		}
	}
	for l := range libs {
		if _, err := b.copy(l); err != nil {
			return err
		}
	}
	return nil
}

// copy puts the file's content at the same path inside the rootfs. Only the
// directory is resolved: the file keeps the name a loader looks up (libc.so.6,
// not the file it links to).
func (b *rootfsBuilder) copy(src string) (string, error) {
	dst := filepath.Join(b.dst, resolvedDir(src), filepath.Base(src))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", fmt.Errorf("create rootfs dir for %q: %w", src, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("open %q: %w", src, err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return "", fmt.Errorf("stat %q: %w", src, err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return "", fmt.Errorf("create %q: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", fmt.Errorf("copy %q: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("copy %q: %w", src, err)
	}
	return dst, nil
}

// verify runs the copied binaries in the rootfs when we may chroot, so that a
// missing library shows here and not as an obscure container failure.
func (b *rootfsBuilder) verify() error {
	if os.Geteuid() != 0 {
		return nil
	}
	cmd := exec.Command("chroot", b.dst, "/bin/sh", "-c", "iptables-nft --version && iptables-legacy --version && true")
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("run iptables in the built rootfs: %w: %s", err, out)
	}
	return nil
}

func resolvedDir(p string) string {
	dir := filepath.Dir(p)
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return r
	}
	return dir
}

func findFile(name string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, strings.Join(dirs, ", "))
}

// lddDeps lists the absolute library paths ldd resolves for an ELF file; a
// static file has none.
func lddDeps(path string) ([]string, error) {
	out, err := exec.Command("ldd", path).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) || bytes.Contains(out, []byte("statically linked")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %q: %w: %s", path, err, out)
	}
	var deps []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			deps = append(deps, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			deps = append(deps, f[0])
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd %q: library %s not found", path, f[0])
		}
	}
	return deps, nil
}
