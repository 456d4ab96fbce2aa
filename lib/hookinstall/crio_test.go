package hookinstall

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path -> content) under a fresh root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
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

func TestReadCRIOConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		found bool
		dirs  string
		from  string
	}{
		{"no CRI-O (containerd node)", map[string]string{"etc/containerd/config.toml": "version = 2\n"}, false, "/usr/share/containers/oci/hooks.d", "built-in"},
		{"upstream crio.conf, hooks_dir commented", map[string]string{"etc/crio/crio.conf": upstreamConf}, true, "/usr/share/containers/oci/hooks.d", "built-in"},
		{"OpenShift drop-in", map[string]string{"etc/crio/crio.conf": upstreamConf, "etc/crio/crio.conf.d/00-default": openshiftDropin}, true,
			"/etc/containers/oci/hooks.d /run/containers/oci/hooks.d /usr/share/containers/oci/hooks.d", "/etc/crio/crio.conf.d/00-default"},
		{"later drop-in wins", map[string]string{
			"etc/crio/crio.conf.d/10-crio.conf": "[crio.runtime]\nhooks_dir = [\"/a\"]\n",
			"etc/crio/crio.conf.d/20-site.conf": "[crio.runtime]\nhooks_dir = ['/b', \"/c/\"]\n",
			"etc/crio/crio.conf.d/30-other":     "[crio.runtime.runtimes.crun]\nruntime_path = \"/usr/bin/crun\"\n",
		}, true, "/b /c", "/etc/crio/crio.conf.d/20-site.conf"},
		{"quoted table name", map[string]string{"etc/crio/crio.conf": "[\"crio\".\"runtime\"]\nhooks_dir = [\"/q\"]\n"}, true, "/q", "crio.conf"},
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

func TestCheckSaysWhatToUse(t *testing.T) {
	c, err := ReadCRIOConfig(tree(t, map[string]string{"etc/crio/crio.conf": upstreamConf}))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Check("/etc/containers/oci/hooks.d")
	if !errors.Is(err, ErrNotRead) || !strings.Contains(err.Error(), "/usr/share/containers/oci/hooks.d") {
		t.Errorf("check of /etc on upstream CRI-O: %v", err)
	}
	if err := c.Check("/usr/share/containers/oci/hooks.d/"); err != nil {
		t.Errorf("check of the default: %v", err)
	}
}

func TestParseHooksDirBroken(t *testing.T) {
	if _, _, err := ParseHooksDir("[crio.runtime]\nhooks_dir = \"/not/an/array\"\n"); err == nil {
		t.Errorf("a string instead of an array: no error")
	}
	dirs, ok, err := ParseHooksDir("[crio.runtime]\nhooks_dir = []\n")
	if err != nil || !ok || len(dirs) != 0 {
		t.Errorf("empty array: %v %v %v", dirs, ok, err)
	}
}
