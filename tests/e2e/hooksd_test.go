package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// hooksFile is the hooks.d schema 1.0.0 (containers/common pkg/hooks).
type hooksFile struct {
	Version string     `json:"version"`
	Hook    specs.Hook `json:"hook"`
	When    struct {
		Always        *bool             `json:"always"`
		Annotations   map[string]string `json:"annotations"`
		Commands      []string          `json:"commands"`
		HasBindMounts *bool             `json:"hasBindMounts"`
	} `json:"when"`
	Stages []string `json:"stages"`
}

// knownStages are the only stages containers/common accepts: one unknown
// stage makes CRI-O refuse to start, losing every hook on the node.
var knownStages = map[string]bool{"prestart": true, "createRuntime": true, "createContainer": true,
	"startContainer": true, "poststart": true, "poststop": true}

func loadShipped(t *testing.T) hooksFile {
	t.Helper()
	data, err := os.ReadFile(shippedHooksFile)
	if err != nil {
		t.Fatalf("read %s: %v", shippedHooksFile, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var f hooksFile
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("decode %s: %v", shippedHooksFile, err)
	}
	return f
}

func TestShippedHooksFile(t *testing.T) {
	f := loadShipped(t)
	if f.Version != "1.0.0" {
		t.Errorf("version %q, want 1.0.0", f.Version)
	}
	if diff := cmp.Diff([]string{"poststart"}, f.Stages); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	for _, s := range f.Stages {
		if !knownStages[s] {
			t.Errorf("unknown stage %q would stop CRI-O from starting", s)
		}
	}
	if !filepath.IsAbs(f.Hook.Path) {
		t.Errorf("hook path %q is not absolute", f.Hook.Path)
	}
	if diff := cmp.Diff([]string{"iptables-alerter-hook", "hook", "--stage", "poststart"}, f.Hook.Args); diff != "" {
		t.Errorf("hook args (-want +got):\n%s", diff)
	}
	var path bool
	for _, e := range f.Hook.Env {
		path = path || strings.HasPrefix(e, "PATH=/")
	}
	if !path {
		t.Errorf("hook env %q sets no PATH: runtimes give hooks an empty environment", f.Hook.Env)
	}
	// The hook's own deadline is 2s plus a 1s watchdog; the runtime must
	// never be the one that kills it (that kills the container too).
	if f.Hook.Timeout == nil || *f.Hook.Timeout < 5 {
		t.Errorf("hook timeout %v, want at least 5 s, well above the internal deadline", f.Hook.Timeout)
	}
	if f.When.Always != nil || f.When.Commands != nil || f.When.HasBindMounts != nil {
		t.Errorf("when must select on annotations only: %+v", f.When)
	}
	if len(f.When.Annotations) == 0 {
		t.Fatal("when.annotations is empty: the hook would never be injected")
	}
	for k, v := range f.When.Annotations {
		for _, re := range []string{k, v} {
			if !strings.HasPrefix(re, "^") || !strings.HasSuffix(re, "$") {
				t.Errorf("when.annotations regexp %q is not anchored: containers/common matches unanchored", re)
			}
			if _, err := regexp.Compile(re); err != nil {
				t.Errorf("when.annotations regexp %q: %v", re, err)
			}
		}
	}
}

// TestShippedHooksWhen applies the shipped when.annotations the way
// containers/common does (every key/value pattern pair must match some
// annotation) to the map CRI-O passes: the kubelet's container annotations
// merged with the pod's annotations. Kubelet *labels* such as
// io.kubernetes.pod.uid are not in that map.
func TestShippedHooksWhen(t *testing.T) {
	f := loadShipped(t)
	cases := []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{
			name: "kubelet app container",
			annotations: map[string]string{
				"io.kubernetes.container.hash":                     "7c9f4d2a",
				"io.kubernetes.container.restartCount":             "0",
				"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
				"io.kubernetes.container.terminationMessagePolicy": "File",
				"io.kubernetes.pod.terminationGracePeriod":         "30",
				"kubernetes.io/config.seen":                        "2024-01-01T00:00:00Z",
				"kubernetes.io/config.source":                      "api",
			},
			want: true,
		},
		{
			name: "kubelet init container",
			annotations: map[string]string{
				"io.kubernetes.container.hash":         "1b2c3d",
				"io.kubernetes.container.restartCount": "0",
				"sidecar.istio.io/status":              `{"initContainers":["istio-init"]}`,
			},
			want: true,
		},
		{name: "no annotations (podman run, runc run)", annotations: map[string]string{}, want: false},
		{
			name:        "pod annotations only",
			annotations: map[string]string{"kubernetes.io/config.seen": "x", "kubernetes.io/config.source": "api"},
			want:        false,
		},
		{
			name:        "key that only contains the pattern",
			annotations: map[string]string{"x.io.kubernetes.container.hash.y": "abc"},
			want:        false,
		},
		{
			name:        "key with any char where the dots are",
			annotations: map[string]string{"io-kubernetes-container-hash": "abc"},
			want:        false,
		},
		{
			name:        "empty hash",
			annotations: map[string]string{"io.kubernetes.container.hash": ""},
			want:        false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := whenMatches(t, f.When.Annotations, tc.annotations); got != tc.want {
				t.Errorf("when.annotations matched %v, want %v", got, tc.want)
			}
		})
	}
}

func whenMatches(t *testing.T, patterns, annotations map[string]string) bool {
	t.Helper()
	for kp, vp := range patterns {
		kre, vre := regexp.MustCompile(kp), regexp.MustCompile(vp)
		found := false
		for k, v := range annotations {
			if kre.MatchString(k) && vre.MatchString(v) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
