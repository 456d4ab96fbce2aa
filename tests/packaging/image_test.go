package packaging

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/inotifytest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
)

const upstreamCRIO = "[crio.runtime]\n# hooks_dir = [\n#   \"/usr/share/containers/oci/hooks.d\",\n# ]\n"

// nodeRoot is a scratch directory standing for a node's "/", with an
// upstream CRI-O configuration unless crio is false.
func nodeRoot(t *testing.T, crio bool) (root, bin, hooks string) {
	t.Helper()
	root = t.TempDir()
	bin, hooks = filepath.Join(root, "usr/local/bin"), filepath.Join(root, "usr/share/containers/oci/hooks.d")
	for _, d := range []string{bin, hooks, filepath.Join(root, "etc/crio")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if crio {
		if err := os.WriteFile(filepath.Join(root, "etc/crio/crio.conf"), []byte(upstreamCRIO), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, bin, hooks
}

func mustMode(t *testing.T, path string, want os.FileMode) os.FileInfo {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("stat installed file: %v", err)
	}
	if st.Mode() != want {
		t.Errorf("%s: mode %v, want %v", path, st.Mode(), want)
	}
	return st
}

func gone(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", p, err)
		}
	}
}

// TestImageDefaultPlatforms: a plain `make image` builds linux/amd64 and
// linux/arm64 (TestImage builds amd64 and s390x through the same loop).
func TestImageDefaultPlatforms(t *testing.T) {
	got, err := testbin.MakeDefault(repo(t), "PLATFORMS")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(got, want) {
		t.Errorf("make's PLATFORMS is %v, want %v", got, want)
	}
}

// One `make image`, then everything that runs in it: the version, the
// labels, and the installer against scratch node roots.
func TestImage(t *testing.T) {
	p := newPodman(t)
	image := p.makeImage()
	const name, js = "iptables-alerter-hook", "iptables-alerter.json"
	hookBin, err := os.ReadFile(filepath.Join(repo(t), "hooks.d", js))
	if err != nil {
		t.Fatal(err)
	}
	asRoot := func(root string) []string { return []string{"--user", "0", "-v", root + ":/host"} }

	t.Run("version", func(t *testing.T) {
		out, err := p.run(image, nil, "version")
		if err != nil || !strings.HasPrefix(out, "version: v9.9.9-test\ncommit: ") || !strings.HasSuffix(out, "\nbuild: full\n") {
			t.Errorf("iptables-alerter version: %q, %v", out, err)
		}
	})

	// The manifest list holds one image per platform, each with the OCI
	// labels, user 65534, and binaries built for its architecture.
	t.Run("platforms", func(t *testing.T) {
		out, err := p.cmd(context.Background(), "manifest", "inspect", image).Output()
		if err != nil {
			t.Fatalf("podman manifest inspect: %v", err)
		}
		var list struct {
			Manifests []struct {
				Digest   string
				Platform struct{ OS, Architecture string }
			}
		}
		if err := json.Unmarshal(out, &list); err != nil {
			t.Fatalf("decode manifest list: %v\n%s", err, out)
		}
		machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "s390x": elf.EM_S390}
		var platforms []string
		for _, m := range list.Manifests {
			platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
			ref := strings.Split(image, ":")[0] + "@" + m.Digest
			b, err := p.cmd(context.Background(), "image", "inspect", ref, "--format",
				`{{.Os}}/{{.Architecture}} {{.Config.User}} {{index .Labels "org.opencontainers.image.version"}} {{index .Labels "org.opencontainers.image.source"}} {{index .Labels "org.opencontainers.image.licenses"}}`).CombinedOutput()
			want := platforms[len(platforms)-1] + " 65534:65534 v9.9.9-test https://github.com/iptables-alerter/iptables-alerter Apache-2.0"
			if got := strings.TrimSpace(string(b)); err != nil || got != want {
				t.Errorf("%s: platform, user and labels %q (%v), want %q", m.Platform.Architecture, got, err, want)
			}
			// Created, never run: the binaries of another architecture are
			// only read.
			name := "platform-" + m.Platform.Architecture
			if b, err := p.cmd(context.Background(), "create", "--pull=never", "--name", name, ref).CombinedOutput(); err != nil {
				t.Fatalf("podman create %s: %v\n%s", ref, err, b)
			}
			for _, bin := range []string{"/usr/bin/iptables-alerter", "/usr/bin/iptables-alerter-agent", "/usr/bin/iptables-alerter-hook"} {
				tarball, err := p.cmd(context.Background(), "cp", name+":"+bin, "-").Output()
				if err != nil {
					t.Fatalf("podman cp %s: %v", bin, err)
				}
				got, err := elfMachine(tarball)
				if err != nil || got != machines[m.Platform.Architecture] {
					t.Errorf("%s %s: ELF machine %v (%v), want %v", m.Platform.Architecture, bin, got, err, machines[m.Platform.Architecture])
				}
			}
		}
		if !slices.Equal(platforms, imagePlatforms) {
			t.Errorf("manifest list platforms %v, want %v", platforms, imagePlatforms)
		}
	})

	t.Run("install, again, uninstall on SIGTERM", func(t *testing.T) {
		root, bin, hooks := nodeRoot(t, true)
		w := inotifytest.New(t, bin, hooks)
		args := []string{"install-hook", "--root", "/host", "--hooks-dir", "/usr/share/containers/oci/hooks.d"}
		if out, err := p.run(image, asRoot(root), args...); err != nil {
			t.Fatalf("install-hook: %v\n%s", err, out)
		}
		// The final names appear only by rename: never visible half-written.
		if got := inotifytest.On(w.Read(), name, js); strings.Join(got, "; ") != "bin moved_to "+name+"; hooks.d moved_to "+js {
			t.Errorf("events on the final names: %q, want the binary renamed in, then the JSON", got)
		}
		st := mustMode(t, filepath.Join(bin, name), 0o755)
		mustMode(t, filepath.Join(hooks, js), 0o644)
		if got, _ := os.ReadFile(filepath.Join(hooks, js)); !bytes.Equal(got, hookBin) {
			t.Errorf("installed JSON differs from hooks.d/%s:\n%s", js, got)
		}
		if ents, _ := os.ReadDir(bin); len(ents) != 1 {
			t.Errorf("bin dir holds %d entries, want only the binary", len(ents))
		}

		if out, err := p.run(image, asRoot(root), args...); err != nil {
			t.Fatalf("install-hook again: %v\n%s", err, out)
		}
		if got := inotifytest.On(w.Read(), name, js); len(got) != 0 {
			t.Errorf("second install touched the files: %q", got)
		}
		if st2, _ := os.Stat(filepath.Join(bin, name)); !os.SameFile(st, st2) {
			t.Errorf("second install replaced the binary")
		}

		// As the DaemonSet's hook container runs it: installed (already),
		// then SIGTERM (pod deleted) uninstalls, JSON first.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		run := append([]string{"run", "-d", "--name", "hookkeeper", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}, asRoot(root)...)
		if out, err := p.cmd(ctx, append(append(run, image), append(args, "--wait")...)...).CombinedOutput(); err != nil {
			t.Fatalf("podman run -d: %v\n%s", err, out)
		}
		// Installed (a no-op), so it waits for the signal; a SIGTERM
		// before the Go runtime's handler exists would be dropped (pid 1).
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			logs, _ := p.cmd(ctx, "logs", "hookkeeper").CombinedOutput()
			if strings.Contains(string(logs), "install-hook: installed") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("hook container did not say it installed within a minute; logs:\n%s", logs)
			}
		}
		if out, err := p.cmd(ctx, "stop", "-t", "20", "hookkeeper").CombinedOutput(); err != nil {
			t.Fatalf("podman stop: %v\n%s", err, out)
		}
		logs, _ := p.cmd(ctx, "logs", "hookkeeper").CombinedOutput()
		ec, _ := p.cmd(ctx, "inspect", "hookkeeper", "--format", "{{.State.ExitCode}}").CombinedOutput()
		if strings.TrimSpace(string(ec)) != "0" {
			t.Errorf("hook container exit code %s; logs:\n%s", ec, logs)
		}
		if got := inotifytest.On(w.Read(), name, js); strings.Join(got, "; ") != "hooks.d delete "+js+"; bin delete "+name {
			t.Errorf("uninstall events %q, want the JSON deleted, then the binary; logs:\n%s", got, logs)
		}
		gone(t, filepath.Join(hooks, js), filepath.Join(bin, name))
	})

	t.Run("DaemonSet hook sidecar, base", func(t *testing.T) {
		testHookSidecar(t, p, image, "packaging/kubernetes", upstreamCRIO)
	})
	t.Run("DaemonSet hook sidecar, openshift", func(t *testing.T) {
		testHookSidecar(t, p, image, "packaging/openshift", openshiftCRIO)
	})

	t.Run("a directory CRI-O does not read is refused", func(t *testing.T) {
		root, bin, _ := nodeRoot(t, true)
		out, err := p.run(image, asRoot(root), "install-hook", "--root", "/host", "--hooks-dir", "/etc/containers/oci/hooks.d")
		if err == nil || !strings.Contains(out, "it reads only /usr/share/containers/oci/hooks.d") {
			t.Errorf("install into /etc on upstream CRI-O: %v\n%s", err, out)
		}
		gone(t, filepath.Join(bin, name), filepath.Join(root, "etc/containers/oci/hooks.d", js))
	})

	t.Run("containerd node: nothing installed", func(t *testing.T) {
		root, bin, hooks := nodeRoot(t, false)
		out, err := p.run(image, asRoot(root), "install-hook", "--root", "/host", "--hooks-dir", "/usr/share/containers/oci/hooks.d")
		if err != nil || !strings.Contains(out, "nothing installed") {
			t.Errorf("install-hook without CRI-O: %v\n%s", err, out)
		}
		gone(t, filepath.Join(bin, name), filepath.Join(hooks, js))
	})
}

// elfMachine is the e_machine of the one file in a tar stream (podman cp
// to stdout).
func elfMachine(tarball []byte) (elf.Machine, error) {
	tr := tar.NewReader(bytes.NewReader(tarball))
	if _, err := tr.Next(); err != nil {
		return 0, fmt.Errorf("read tar header: %w", err)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return 0, fmt.Errorf("read tar entry: %w", err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return 0, fmt.Errorf("parse ELF: %w", err)
	}
	return f.Machine, nil
}
