package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/lib/nodemark"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

// docs/install.md's "What an uninstall leaves" names what deleting the
// DaemonSet leaves behind, which each install doc's uninstall links to:
// every host directory of the project's own the DaemonSet's volumes create
// (findings, checkpoint, state, allowlist), the node label the forwarder
// keeps with the command that removes it (a pool gate would read a stale
// ready from it), and the Reports by the label they carry. The docs'
// uninstall steps said none of it.
func TestUninstallLeavesDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repo(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## What an uninstall leaves\n")
	if !ok {
		t.Fatal("docs/install.md has no section What an uninstall leaves")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	data, err := os.ReadFile(filepath.Join(repo(t), "packaging", "kubernetes", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(data, &ds); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && strings.Contains(v.HostPath.Path, "iptables-alerter") {
			// Its top directory of the project's own: /var/lib/iptables-alerter
			// for /var/lib/iptables-alerter/forward.
			p := v.HostPath.Path
			for strings.Contains(filepath.Dir(p), "iptables-alerter") {
				p = filepath.Dir(p)
			}
			dirs = append(dirs, p)
		}
	}
	if len(dirs) < 4 {
		t.Fatalf("the DaemonSet's own host directories: %v, want at least the four", dirs)
	}
	want := append(dirs,
		"kubectl label nodes --all "+nodemark.DefaultLabel+"-",
		openreports.ManagedByLabel+"="+openreports.ManagedBy,
		"/usr/local/bin/iptables-alerter-hook")
	for _, w := range want {
		if !strings.Contains(section, w) {
			t.Errorf("docs/install.md's What an uninstall leaves does not name %s", w)
		}
	}
	for _, d := range []string{"install-helm.md", "install-kustomize.md", "install-openshift.md"} {
		data, err := os.ReadFile(filepath.Join(repo(t), "docs", d))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "install.md#what-an-uninstall-leaves") {
			t.Errorf("docs/%s's uninstall does not link to install.md#what-an-uninstall-leaves", d)
		}
	}
}
