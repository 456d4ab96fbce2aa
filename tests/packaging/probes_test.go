package packaging

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// checkProbes: every probe of every container is an exec probe running
// `health --addr=A` of the container's own program (its command, else the
// image's entrypoint: the agent's is the agent-only build), A the
// container's own --probe-addr on loopback, with an explicit
// timeoutSeconds: the kubelet's HTTP probe reaches the pod's IP, whose
// health port one client could fill.
func checkProbes(t *testing.T, containers []corev1.Container) {
	t.Helper()
	probed := 0
	for _, c := range containers {
		addr, _ := argValue(c.Args, "probe-addr")
		bin := "/usr/bin/iptables-alerter"
		if len(c.Command) > 0 {
			bin = c.Command[0]
		}
		// The agent runs its own smaller build (docs/performance.md).
		if c.Name == "agent" && bin != "/usr/bin/iptables-alerter-agent" {
			t.Errorf("agent: runs %s, want the agent-only build /usr/bin/iptables-alerter-agent", bin)
		}
		// The forwarder's probe port listens only after its first API
		// calls (whether to write Reports); a slow API server must not
		// get it killed before then.
		if s := c.StartupProbe; c.Name == "forward" && (s == nil || s.PeriodSeconds*s.FailureThreshold < 300) {
			t.Errorf("forward: startup probe %+v, want one allowing 5 minutes or more before liveness", s)
		}
		for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if p == nil {
				continue
			}
			probed++
			if p.Exec == nil || !slices.Equal(p.Exec.Command, []string{bin, "health", "--addr=" + addr}) || addr == "" {
				t.Errorf("%s: %s probe %+v, want exec of %s health --addr=<its --probe-addr %q>", c.Name, kind, p.ProbeHandler, bin, addr)
			}
			if p.TimeoutSeconds <= 0 {
				t.Errorf("%s: %s probe without timeoutSeconds", c.Name, kind)
			}
		}
	}
	if probed == 0 {
		t.Error("no probe at all")
	}
}

func TestProbes(t *testing.T) {
	eachDaemonSet(t, func(t *testing.T, spec corev1.PodSpec) { checkProbes(t, spec.Containers) })
	for _, k := range []string{"packaging/openshift-no-sidecar", "secure-metrics"} {
		t.Run(filepath.Base(k), func(t *testing.T) {
			if k == "secure-metrics" {
				k = secureOverlay(t)
			}
			checkProbes(t, renderedDaemonSet(t, k).Spec.Template.Spec.Containers)
		})
	}
	t.Run("helm", func(t *testing.T) {
		for _, set := range [][]string{nil, {"openshift.enabled=true"}, {"metrics.secure.enabled=true"}} {
			checkProbes(t, daemonSetPod(t, objects(t, helmTemplate(t, set...))).Containers)
		}
	})
	t.Run("textfile container", func(t *testing.T) { checkProbes(t, textfileContainers(t)) })
}

// textfileContainers is packaging/kubernetes/textfile-container.yaml, the
// container an admin adds to node-exporter's DaemonSet.
func textfileContainers(t *testing.T) []corev1.Container {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo(t), "packaging/kubernetes/textfile-container.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cs []corev1.Container
	if err := yaml.UnmarshalStrict(b, &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}
