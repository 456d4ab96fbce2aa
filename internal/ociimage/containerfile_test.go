package main

import (
	"archive/tar"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The shipped Containerfile parses into what `make image` builds with
// podman: its labels with the build args, the four files (the full, the
// agent-only and the hook build, the hooks.d JSON), the user and the
// entrypoint.
func TestShippedContainerfile(t *testing.T) {
	data, err := os.ReadFile("../../packaging/Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseContainerfile(string(data), map[string]string{"VERSION": "v1.2.3", "REVISION": "abc"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Labels["org.opencontainers.image.version"] != "v1.2.3" || s.Labels["org.opencontainers.image.revision"] != "abc" ||
		s.Labels["org.opencontainers.image.created"] != "1970-01-01T00:00:00Z" || !strings.Contains(s.Labels["org.opencontainers.image.description"], " ") {
		t.Errorf("labels %v", s.Labels)
	}
	if s.User != "65534:65534" || !reflect.DeepEqual(s.Entrypoint, []string{"/usr/bin/iptables-alerter"}) || !reflect.DeepEqual(s.Cmd, []string{"--help"}) {
		t.Errorf("user %q entrypoint %q cmd %q", s.User, s.Entrypoint, s.Cmd)
	}
	got := map[string]string{}
	for _, c := range s.Copies {
		m, err := c.Targets()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			got[k] = v
		}
	}
	want := map[string]string{"iptables-alerter": "/usr/bin/iptables-alerter", "iptables-alerter-hook": "/usr/bin/iptables-alerter-hook",
		"iptables-alerter-agent": "/usr/bin/iptables-alerter-agent",
		"iptables-alerter.json":  "/usr/share/iptables-alerter/iptables-alerter.json"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("copies %v, want %v", got, want)
	}
}

// What needs a builder or an engine is refused, not skipped.
func TestContainerfileRefuses(t *testing.T) {
	for _, bad := range []string{
		"FROM alpine\n",
		"FROM scratch\nRUN true\n",
		"COPY a /a\nFROM scratch\n",
		"FROM scratch\nCOPY --chown=1 a /a\n",
		"FROM scratch\nCOPY a b /dir\n",
		"FROM scratch\nCMD --help\n",
		"FROM scratch\nLABEL a=\"b\n",
		"ARG X\n",
	} {
		s, err := parseContainerfile(bad, nil)
		if err == nil {
			if _, err = layerCheck(t, s); err == nil {
				t.Errorf("%q: accepted", bad)
			}
		}
	}
}

// layerCheck writes the layer of s from an empty context.
func layerCheck(t *testing.T, s *spec) (string, error) {
	out := filepath.Join(t.TempDir(), "l.tar")
	return out, writeLayer(out, s.Copies, t.TempDir(), time.Unix(0, 0))
}

// The layer holds each file with its mode and the given time, its parent
// directories first, and nothing of the build machine (owner, time).
func TestLayer(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bin"), []byte("elf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conf.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	out := filepath.Join(t.TempDir(), "l.tar")
	if err := writeLayer(out, []copyOp{{Srcs: []string{"bin"}, Dst: "/usr/bin/"}, {Srcs: []string{"conf.json"}, Dst: "/usr/share/x/y.json"}}, dir, when); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if !h.ModTime.Equal(when) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: time %v uid %d gid %d", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		got = append(got, h.Name+" "+os.FileMode(h.Mode).String())
	}
	want := []string{"usr/ -rwxr-xr-x", "usr/bin/ -rwxr-xr-x", "usr/bin/bin -rwxr-xr-x", "usr/share/ -rwxr-xr-x", "usr/share/x/ -rwxr-xr-x", "usr/share/x/y.json -rw-------"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layer %q, want %q", got, want)
	}
	if err := writeLayer(out, []copyOp{{Srcs: []string{"../etc/passwd"}, Dst: "/p"}}, dir, when); err == nil {
		t.Errorf("a COPY from outside the context was accepted")
	}
}
