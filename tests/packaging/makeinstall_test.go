package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `make install` into a scratch root holding an upstream CRI-O
// configuration, or CRI-O's binary and no configuration (CRI-O on its
// built-in default): the default /etc/containers/oci/hooks.d, which that
// CRI-O does not read, is refused with the directory to use, before
// anything is written; that directory works.
func TestMakeInstallChecksCRIO(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	bin := t.TempDir()
	for _, tc := range []struct {
		name string
		path string // node path of the file that makes it a CRI-O node
		data string
	}{
		{"upstream configuration", "etc/crio/crio.conf.d/10-crio.conf", upstreamCRIO},
		{"crio binary, no configuration", "usr/bin/crio", "#!/bin/sh\nexit 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Dir(filepath.Join(root, tc.path)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, tc.path), []byte(tc.data), 0o755); err != nil {
				t.Fatal(err)
			}
			mk := func(args ...string) (string, error) {
				out, err := exec.Command("make", append([]string{"-C", repo(t), "install", "DESTDIR=" + root,
					"BIN=" + bin + "/iptables-alerter", "HOOKBIN=" + bin + "/iptables-alerter-hook", "AGENTBIN=" + bin + "/iptables-alerter-agent"}, args...)...).CombinedOutput()
				return string(out), err
			}
			out, err := mk()
			if err == nil || !strings.Contains(out, "it reads only /usr/share/containers/oci/hooks.d") {
				t.Errorf("make install into /etc on upstream CRI-O: %v\n%s", err, out)
			}
			if _, err := os.Stat(filepath.Join(root, "usr/local/bin/iptables-alerter-hook")); err == nil {
				t.Errorf("refused make install still wrote the binary")
			}
			if out, err := mk("HOOKSDIR=/usr/share/containers/oci/hooks.d"); err != nil {
				t.Fatalf("make install HOOKSDIR=/usr/share/...: %v\n%s", err, out)
			}
			for _, f := range []string{"usr/local/bin/iptables-alerter-hook", "usr/local/bin/iptables-alerter-agent", "usr/share/containers/oci/hooks.d/iptables-alerter.json"} {
				if _, err := os.Stat(filepath.Join(root, f)); err != nil {
					t.Errorf("make install: %v", err)
				}
			}
		})
	}
}
