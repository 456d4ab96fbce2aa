package packaging

import (
	"bytes"
	"encoding/base64"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the MachineConfig YAML from its Butane source, the console dashboard from the Grafana one")

// butane is the part of Butane's openshift variant the sources use.
type butane struct {
	Variant  string `json:"variant"`
	Version  string `json:"version"`
	Metadata struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Storage struct {
		Files []struct {
			Path     string `json:"path"`
			Mode     int    `json:"mode"`
			Contents struct {
				Local  string  `json:"local"`
				Inline *string `json:"inline"`
			} `json:"contents"`
		} `json:"files"`
	} `json:"storage"`
	Systemd struct {
		Units []struct {
			Name    string `json:"name"`
			Enabled bool   `json:"enabled"`
		} `json:"units"`
	} `json:"systemd"`
}

type mcFile struct {
	Path     string `json:"path"`
	Mode     int    `json:"mode"`
	Contents struct {
		Source string `json:"source"`
	} `json:"contents"`
}

type machineConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Config struct {
			Ignition struct {
				Version string `json:"version"`
			} `json:"ignition"`
			Storage struct {
				Files []mcFile `json:"files,omitempty"`
			} `json:"storage"`
			Systemd *struct {
				Units []struct {
					Name    string `json:"name"`
					Enabled bool   `json:"enabled"`
				} `json:"units"`
			} `json:"systemd,omitempty"`
		} `json:"config"`
	} `json:"spec"`
}

// translate does what `butane --files-dir <repo>` does for these sources:
// local and inline contents become data URLs, the same bytes. (Butane
// itself may compress or URL-escape instead: an equivalent config.)
func translate(t *testing.T, src []byte) machineConfig {
	t.Helper()
	var b butane
	if err := yaml.UnmarshalStrict(src, &b); err != nil {
		t.Fatalf("parse Butane source: %v", err)
	}
	if b.Variant != "openshift" || b.Version != "4.14.0" {
		t.Fatalf("Butane variant %s %s: want openshift 4.14.0", b.Variant, b.Version)
	}
	var mc machineConfig
	mc.APIVersion, mc.Kind = "machineconfiguration.openshift.io/v1", "MachineConfig"
	mc.Metadata.Name, mc.Metadata.Labels = b.Metadata.Name, b.Metadata.Labels
	mc.Spec.Config.Ignition.Version = "3.4.0"
	for _, f := range b.Storage.Files {
		var data []byte
		if f.Contents.Inline != nil {
			data = []byte(*f.Contents.Inline)
		} else {
			var err error
			if data, err = os.ReadFile(filepath.Join(repo(t), f.Contents.Local)); err != nil {
				t.Fatalf("read local contents: %v", err)
			}
		}
		mf := mcFile{Path: f.Path, Mode: f.Mode}
		mf.Contents.Source = "data:;base64," + base64.StdEncoding.EncodeToString(data)
		mc.Spec.Config.Storage.Files = append(mc.Spec.Config.Storage.Files, mf)
	}
	if len(b.Systemd.Units) > 0 {
		mc.Spec.Config.Systemd = &struct {
			Units []struct {
				Name    string `json:"name"`
				Enabled bool   `json:"enabled"`
			} `json:"units"`
		}{Units: b.Systemd.Units}
	}
	return mc
}

// Each committed MachineConfig is its Butane source translated, and its
// files hold exactly the repository's hooks.d JSON and units.
func TestMachineConfig(t *testing.T) {
	dir := filepath.Join(repo(t), "packaging/openshift/machineconfig")
	sources, _ := filepath.Glob(filepath.Join(dir, "*.bu"))
	if len(sources) < 2 {
		t.Fatalf("Butane sources: %v", sources)
	}
	// The same configuration for another pool: its files, by name with
	// the pool left out (50-worker-x and 50-master-x are both 50--x).
	pools := map[string]map[string][]byte{}
	for _, bu := range sources {
		src, err := os.ReadFile(bu)
		if err != nil {
			t.Fatal(err)
		}
		out, err := yaml.Marshal(translate(t, src))
		if err != nil {
			t.Fatal(err)
		}
		out = append([]byte("# Generated from "+filepath.Base(bu)+" by make machineconfig; do not edit.\n"), out...)
		gen := strings.TrimSuffix(bu, ".bu") + ".yaml"
		if *update {
			if err := os.WriteFile(gen, out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		committed, err := os.ReadFile(gen)
		if err != nil {
			t.Fatalf("read generated MachineConfig: %v", err)
		}
		if !bytes.Equal(committed, out) {
			t.Errorf("%s is not %s translated: run make machineconfig", filepath.Base(gen), filepath.Base(bu))
		}
		// Read back as a MachineConfig, independently of the translation.
		var mc machineConfig
		if err := yaml.UnmarshalStrict(committed, &mc); err != nil {
			t.Fatalf("parse %s: %v", gen, err)
		}
		// One source per pool: the pool is in the name (50-worker-...).
		role := mc.Metadata.Labels["machineconfiguration.openshift.io/role"]
		if mc.Kind != "MachineConfig" || role == "" || !strings.Contains(mc.Metadata.Name, "-"+role+"-") {
			t.Errorf("%s: kind %q name %q labels %v", gen, mc.Kind, mc.Metadata.Name, mc.Metadata.Labels)
		}
		files := mcFiles(t, mc)
		same := strings.Replace(mc.Metadata.Name, "-"+role+"-", "--", 1)
		if other, ok := pools[same]; ok && !maps.EqualFunc(files, other, bytes.Equal) {
			t.Errorf("%s: not the same files as the other pools' %s", gen, same)
		}
		pools[same] = files
		for path, data := range files {
			want := fromRepo[path]
			switch {
			case want != "":
				repoBytes, _ := os.ReadFile(filepath.Join(repo(t), want))
				if !bytes.Equal(data, repoBytes) {
					t.Errorf("%s in %s differs from the repository's %s", path, filepath.Base(gen), want)
				}
			case path == "/etc/crio/crio.conf.d/99-nri.conf":
				if string(data) != "[crio.nri]\nenable_nri = true\n" {
					t.Errorf("NRI drop-in: %q", data)
				}
			default:
				t.Errorf("unexpected file %s in %s", path, filepath.Base(gen))
			}
		}
		for _, f := range mc.Spec.Config.Storage.Files {
			if f.Mode != 0o644 {
				t.Errorf("%s: mode %o", f.Path, f.Mode)
			}
		}
	}
}

// fromRepo maps each node path a MachineConfig writes to the repository
// file it holds.
var fromRepo = map[string]string{
	"/etc/containers/oci/hooks.d/iptables-alerter.json":    "hooks.d/iptables-alerter.json",
	"/etc/systemd/system/iptables-alerter-install.service": "packaging/openshift/machineconfig/iptables-alerter-install.service",
	installEnv: "packaging/openshift/machineconfig/iptables-alerter-install.env",
}

// installEnv is where the MachineConfig puts the image reference the
// install unit reads: the one place it is set.
const installEnv = "/etc/iptables-alerter/install.env"

// mcFiles decodes the files of a MachineConfig: node path -> content.
func mcFiles(t *testing.T, mc machineConfig) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, f := range mc.Spec.Config.Storage.Files {
		data, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(f.Contents.Source, "data:;base64,"))
		if err != nil {
			t.Fatalf("decode %s: %v", f.Path, err)
		}
		files[f.Path] = data
	}
	return files
}

// committedMachineConfigs reads every generated MachineConfig: file name -> config.
func committedMachineConfigs(t *testing.T) map[string]machineConfig {
	t.Helper()
	gens, _ := filepath.Glob(filepath.Join(repo(t), "packaging/openshift/machineconfig/*.yaml"))
	mcs := map[string]machineConfig{}
	for _, gen := range gens {
		data, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		var mc machineConfig
		if err := yaml.UnmarshalStrict(data, &mc); err != nil {
			t.Fatalf("parse %s: %v", gen, err)
		}
		mcs[filepath.Base(gen)] = mc
	}
	return mcs
}
