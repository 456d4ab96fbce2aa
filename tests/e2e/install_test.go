package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestPodmanBrokenInstall breaks the install itself, which the hook binary
// cannot defend against, and requires every container to start: the binary
// removed (uninstalled, or mid-upgrade by a tool that unlinks first),
// replaced by `make install-files` while containers start, and replaced by
// one that hangs. The hooks.d JSON is the shipped one, installed by the
// Makefile.
func TestPodmanBrokenInstall(t *testing.T) {
	for _, rt := range []string{"crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			needPodman(t, rt)
			// Every container is of one pod: one finding per sandbox.
			p := newPod("install-"+rt, "app")
			var ids []string
			start := func(t *testing.T, pm *podman, ns *nstest.NS) time.Duration {
				t.Helper()
				began := time.Now()
				id, out := pm.run(ns.Path(), p.annotations(), nil, "sh", "-c", "echo alive")
				took := time.Since(began)
				if !strings.Contains(out, "alive") {
					t.Errorf("container printed %q, want alive", out)
				}
				ids = append(ids, id)
				return took
			}
			t.Run("binary removed", func(t *testing.T) {
				ns := nstest.New(t)
				ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "ACCEPT")
				files := newHookFiles(t)
				pm, bindir := newPodman(t, rt, files.args())
				if err := os.Remove(filepath.Join(bindir, "iptables-alerter-hook")); err != nil {
					t.Fatal(err)
				}
				took := start(t, pm, ns)
				t.Logf("container start with the hook binary missing: %v", took)
				if recs := findingstest.Read(t, files.findings); len(recs) != 0 {
					t.Errorf("%d findings without a binary", len(recs))
				}
			})
			t.Run("binary replaced while containers start", func(t *testing.T) {
				ns := nstest.New(t)
				ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "ACCEPT")
				files := newHookFiles(t)
				pm, bindir := newPodman(t, rt, files.args())
				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(1)
				installs := 0
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						makeInstall(t, bindir, filepath.Join(t.TempDir(), "hooks.d"))
						installs++
					}
				}()
				ids = nil
				for i := 0; i < 6; i++ {
					start(t, pm, ns)
				}
				close(stop)
				wg.Wait()
				t.Logf("%d installs while 6 containers started", installs)
				// Every hook ran, the old binary or the new one, never half a
				// file; the findings file holds whole lines only.
				log := readLog(t, files.log)
				for _, id := range ids {
					if !strings.Contains(log, id) {
						t.Errorf("no hook log line for container %s: the hook did not run\n%s", id, log)
					}
				}
				if recs := findingstest.Read(t, files.findings); len(recs) == 0 {
					t.Errorf("no finding for a pod with a rule\n%s", log)
				}
			})
			t.Run("binary hangs", func(t *testing.T) {
				ns := nstest.New(t)
				files := newHookFiles(t)
				pm, bindir := newPodman(t, rt, files.args())
				// A stand-in for a binary stuck for good: it never reads its
				// stdin nor exits.
				replaceFile(t, filepath.Join(bindir, "iptables-alerter-hook"), "#!/bin/sh\nexec sleep 3600\n", 0o755)
				// The command gives up on the hook after 5 s (and exits a second
				// later, see guardCommand); past the JSON's 10 s timeout both
				// runtimes fail the run, so the start is the verdict and its
				// time a figure.
				took := start(t, pm, ns)
				t.Logf("container start with a hanging hook binary: %v", took)
			})
		})
	}
}

// TestRuntimeBrokenInstall: what CRI-O does with the shipped entry. It
// reads hooks.d when it starts (or when the directory changes) and copies
// the entry into each container's config.json, so a binary removed or
// replaced after that meets the runtime directly (podman, which re-reads
// hooks.d at every run, skips an entry whose path is missing and hides
// this). The container must start and exit 0 in each case: a hook past
// the JSON's timeout fails the run under both runtimes, so the run's
// success is the verdict and its time a figure (at once for a missing or
// failing binary, about 6 s for a hanging one on a quiet machine).
func TestRuntimeBrokenInstall(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(t *testing.T, bin string)
	}{
		{name: "binary removed", breakIt: func(t *testing.T, bin string) {
			if err := os.Remove(bin); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "binary not a program", breakIt: func(t *testing.T, bin string) {
			replaceFile(t, bin, "\x7fELF truncated", 0o755)
		}},
		{name: "binary exits 1", breakIt: func(t *testing.T, bin string) {
			replaceFile(t, bin, "#!/bin/sh\nexit 1\n", 0o755)
		}},
		{name: "binary hangs", breakIt: func(t *testing.T, bin string) {
			replaceFile(t, bin, "#!/bin/sh\nexec sleep 3600\n", 0o755)
		}},
	}
	for _, rt := range []string{"crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					nstest.NeedRoot(t, rt, "unshare", "make", "timeout")
					needRootfs(t)
					ns := nstest.New(t)
					files := newHookFiles(t)
					dir := t.TempDir()
					bindir, hooksDir := filepath.Join(dir, "bin"), filepath.Join(dir, "hooks.d")
					makeInstall(t, bindir, hooksDir)
					appendHookArgs(t, filepath.Join(hooksDir, "iptables-alerter.json"), files.args())
					hook := installedHook(t, filepath.Join(hooksDir, "iptables-alerter.json"))
					tc.breakIt(t, filepath.Join(bindir, "iptables-alerter-hook"))
					bundle := writeBundleHook(t, ns.Path(), newPod("install-"+rt, "app").annotations(), hook)
					began := time.Now()
					out := runContainer(t, rt, bundle, "e2e-"+rt+"-"+randHex(6))
					t.Logf("%s: container ran in %v", tc.name, time.Since(began))
					if !strings.Contains(out, "alive") {
						t.Errorf("container printed %q, want alive", out)
					}
				})
			}
		})
	}
}

// installedHook is the hook entry of an installed hooks.d file, as CRI-O
// puts it into config.json.
func installedHook(t *testing.T, path string) specs.Hook {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Hook specs.Hook `json:"hook"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	return f.Hook
}

// replaceFile puts content at path the way install-files does: a temporary
// name in the same directory, then a rename.
func replaceFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".replace.tmp")
	if err := os.WriteFile(tmp, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
