package packaging

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// unit is a parsed systemd unit file: section -> key -> values, in order.
type unit map[string]map[string][]string

// parseUnit reads a unit file as systemd does for what ours use: comments
// (# and ;), [Section] headers, Key=Value, a trailing backslash joining
// the next line.
func parseUnit(t *testing.T, data []byte) unit {
	t.Helper()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for strings.HasSuffix(line, `\`) && sc.Scan() {
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("unit line %q: not Key=Value in a section", line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

// last is the value that counts for a single-valued setting.
func (u unit) last(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// list is the space-separated entries of a list setting (After=, Before=...).
func (u unit) list(section, key string) []string {
	var out []string
	for _, v := range u[section][key] {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

// span parses a systemd time span as the units here write it ("90",
// "30s", "5min", "1min 30s"); ok is false for "infinity", 0 or garbage.
func span(s string) (d time.Duration, ok bool) {
	units := map[string]time.Duration{"": time.Second, "s": time.Second, "sec": time.Second,
		"m": time.Minute, "min": time.Minute, "h": time.Hour, "hr": time.Hour}
	re := regexp.MustCompile(`^([0-9]+)\s*([a-z]*)$`)
	for _, part := range strings.Fields(s) {
		m := re.FindStringSubmatch(part)
		if m == nil {
			return 0, false
		}
		u, known := units[m[2]]
		n, err := strconv.Atoi(m[1])
		if !known || err != nil {
			return 0, false
		}
		d += time.Duration(n) * u
	}
	return d, d > 0
}

// runtimeUnits are what a node needs up before it can run any pod.
var runtimeUnits = []string{"crio.service", "kubelet.service"}

// Nothing a MachineConfig writes can keep CRI-O or the kubelet from
// starting: no unit of ours is ordered before anything (crio and the
// kubelet come after network-online.target and more; a Before= on any of
// those would hold them too), none is wanted or required by them, no
// drop-in of theirs names ours, and the installer's start is bounded and
// retried rather than waited for. A registry that accepts the connection
// and never answers must cost the node its hook for a while, never its
// runtime.
func TestInstallUnitNeverBlocksRuntime(t *testing.T) {
	for name, mc := range committedMachineConfigs(t) {
		for path, data := range mcFiles(t, mc) {
			if !strings.HasPrefix(path, "/etc/systemd/system/") {
				continue
			}
			for _, r := range runtimeUnits {
				if strings.Contains(path, r) && bytes.Contains(data, []byte("iptables-alerter")) {
					t.Errorf("%s: %s (a drop-in of %s) names one of our units", name, path, r)
				}
			}
			if !strings.HasSuffix(path, ".service") {
				continue
			}
			u := parseUnit(t, data)
			if b := u.list("Unit", "Before"); len(b) > 0 {
				t.Errorf("%s: %s is ordered Before=%v: whatever comes after those (CRI-O, the kubelet) waits for it", name, path, b)
			}
			for _, k := range []string{"WantedBy", "RequiredBy", "UpheldBy"} {
				for _, r := range runtimeUnits {
					if slices.Contains(u.list("Install", k), r) {
						t.Errorf("%s: %s is %s=%s", name, path, k, r)
					}
				}
			}
			if u.last("Service", "Type") != "oneshot" {
				continue
			}
			// A oneshot has no start timeout unless it sets one.
			if d, ok := span(u.last("Service", "TimeoutStartSec")); !ok || d > 10*time.Minute {
				t.Errorf("%s: %s: TimeoutStartSec=%q: want a bound of at most 10 minutes", name, path, u.last("Service", "TimeoutStartSec"))
			}
			// Restart= on a oneshot needs systemd 244; the Butane variant
			// (openshift 4.14) means RHCOS 9, systemd 252.
			if r := u.last("Service", "Restart"); r != "on-failure" {
				t.Errorf("%s: %s: Restart=%q: want on-failure (a failed or timed-out install retried later)", name, path, r)
			}
			if _, ok := span(u.last("Service", "RestartSec")); !ok {
				t.Errorf("%s: %s: RestartSec=%q: want a pause between tries", name, path, u.last("Service", "RestartSec"))
			}
			if u.last("Unit", "StartLimitIntervalSec") != "0" {
				t.Errorf("%s: %s: StartLimitIntervalSec=%q: want 0 (retry for as long as it takes)", name, path, u.last("Unit", "StartLimitIntervalSec"))
			}
		}
	}
}

// digestRef is an image named by digest: registry[:port]/path@sha256:hex.
var digestRef = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$`)

// The installer runs the image named by digest, from one place (the
// environment file the MachineConfig writes), pulled with the cluster's
// pull secret: no tag, no :latest, no pull without credentials.
func TestInstallUnitImage(t *testing.T) {
	const unitPath = "/etc/systemd/system/iptables-alerter-install.service"
	for name, mc := range committedMachineConfigs(t) {
		files := mcFiles(t, mc)
		for path, data := range files {
			if bytes.Contains(data, []byte(":latest")) {
				t.Errorf("%s: %s names an image by :latest", name, path)
			}
		}
		data, ok := files[unitPath]
		if !ok {
			continue
		}
		env, ok := files[installEnv]
		if !ok {
			t.Errorf("%s writes the install unit but not %s, the image it reads", name, installEnv)
			continue
		}
		var refs []string
		for _, line := range strings.Split(string(env), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || line[0] == '#' || line[0] == ';' {
				continue
			}
			k, v, _ := strings.Cut(line, "=")
			if k != "IPTABLES_ALERTER_IMAGE" {
				t.Errorf("%s: %s: unexpected line %q", name, installEnv, line)
				continue
			}
			refs = append(refs, v)
		}
		if len(refs) != 1 || !digestRef.MatchString(refs[0]) {
			t.Errorf("%s: %s: IPTABLES_ALERTER_IMAGE %q: want one image@sha256:<64 hex>", name, installEnv, refs)
		}

		u := parseUnit(t, data)
		if ef := u[`Service`]["EnvironmentFile"]; !slices.Equal(ef, []string{installEnv}) {
			t.Errorf("%s: EnvironmentFile=%q: want %s (without '-': no image, no start)", name, ef, installEnv)
		}
		for _, e := range u["Service"]["Environment"] {
			if strings.Contains(e, "IPTABLES_ALERTER_IMAGE") {
				t.Errorf("%s: the unit sets the image itself (%q): it must come only from %s", name, e, installEnv)
			}
		}
		// One podman command: a run that pulls, with the pull secret, only
		// what is missing (a digest names one image): no registry traffic
		// at a reboot, and a reboot with the registry down still installs.
		var cmds []string
		for _, key := range []string{"ExecStartPre", "ExecStart", "ExecStartPost"} {
			for _, cmd := range u["Service"][key] {
				if args := strings.Fields(cmd); len(args) > 0 && strings.TrimLeft(args[0], "-@+!:") == "/usr/bin/podman" {
					cmds = append(cmds, key+"="+cmd)
				}
			}
		}
		if len(cmds) != 1 {
			t.Errorf("%s: podman commands %q: want one ExecStart=/usr/bin/podman run", name, cmds)
			continue
		}
		args := strings.Fields(cmds[0])
		for _, want := range []string{"ExecStart=/usr/bin/podman", "run", "--pull=missing", "--authfile=/var/lib/kubelet/config.json", "${IPTABLES_ALERTER_IMAGE}"} {
			if !slices.Contains(args, want) {
				t.Errorf("%s: %s: no %s (want ExecStart=/usr/bin/podman run --pull=missing --authfile=/var/lib/kubelet/config.json ... ${IPTABLES_ALERTER_IMAGE})", name, cmds[0], want)
			}
		}
		// This route owns the files: install-hook's default owner file is
		// its own environment file, whose presence makes install-hook
		// write nothing (the sidecar's rule).
		if i := slices.Index(args, "install-hook"); i < 0 || !slices.Contains(args[i:], "--owner-file=") {
			t.Errorf("%s: %s: no --owner-file= after install-hook (the unit is the owner; install-hook writes nothing while %s exists)", name, cmds[0], installEnv)
		}
	}
}

// systemd itself accepts the unit: systemd-analyze verify (systemd 252
// here, as on RHCOS 9) prints nothing and exits 0. It rejects, for
// instance, Restart= values a oneshot may not have, and warns (exit 0)
// about a setting it cannot parse: both fail here.
func TestInstallUnitVerifies(t *testing.T) {
	_, err := exec.LookPath("systemd-analyze")
	nstest.Need(t, err == nil, "needs systemd-analyze (apt-get install systemd)")
	// verify checks that ExecStart's program exists.
	_, err = os.Stat("/usr/bin/podman")
	nstest.Need(t, err == nil, "needs /usr/bin/podman (apt-get install podman)")
	unitFile := filepath.Join(repo(t), "packaging/openshift/machineconfig/iptables-alerter-install.service")
	out, err := exec.Command("systemd-analyze", "verify", unitFile).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(unitFile), err, out)
	}
}

// TestHookSidecarSeesOwnerFile: every rendered hook installer (install-hook
// in a container of the DaemonSet, with --root /host) mounts the node's
// /etc/iptables-alerter at /host/etc/iptables-alerter from a hostPath:
// without it, the MachineConfig route's install.env is unseen, and the
// sidecar writes its JSON over the MachineConfig's (drift the Machine
// Config Operator marks the node Degraded for).
func TestHookSidecarSeesOwnerFile(t *testing.T) {
	for _, tc := range []struct {
		name, dir string
		set       []string
	}{
		{name: "kubernetes", dir: "packaging/kubernetes"},
		{name: "openshift", dir: "packaging/openshift"},
		{name: "helm", set: withAPI()},
		{name: "helm openshift", set: withAPI("openshift.enabled=true")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs map[string]map[string]any
			if tc.dir != "" {
				objs = objects(t, kustomize(t, filepath.Join(repo(t), tc.dir)))
			} else {
				objs = objects(t, helmTemplate(t, tc.set...))
			}
			spec := daemonSetPod(t, objs)
			hostPaths := map[string]string{}
			for _, v := range spec.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = v.HostPath.Path
				}
			}
			found := 0
			for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
				if !slices.Contains(c.Args, "install-hook") {
					continue
				}
				found++
				if !slices.Contains(c.Args, "--root=/host") && !slices.Contains(c.Args, "/host") {
					t.Errorf("container %s: install-hook args %q: want --root=/host", c.Name, c.Args)
				}
				seen := false
				for _, m := range c.VolumeMounts {
					if m.MountPath == "/host/etc/iptables-alerter" && hostPaths[m.Name] == "/etc/iptables-alerter" {
						seen = true
					}
				}
				if !seen {
					t.Errorf("container %s runs install-hook without the node's /etc/iptables-alerter at /host/etc/iptables-alerter", c.Name)
				}
			}
			if found != 1 {
				t.Errorf("%d containers run install-hook, want the hook sidecar", found)
			}
		})
	}
}
