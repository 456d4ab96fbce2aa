package packaging

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestAgentSeesNode: the agent tells host-network pods apart by the
// node's netns, pid 1's under the host's /proc. Both DaemonSets mount the
// host's /proc read-only where --host-proc points and give the one
// capability opening pid 1's netns takes (CAP_SYS_PTRACE); the systemd
// unit sees /proc directly, sets nothing that hides it and keeps
// CAP_SYS_PTRACE in its bounding set.
func TestAgentSeesNode(t *testing.T) {
	eachDaemonSet(t, func(t *testing.T, spec corev1.PodSpec) {
		i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "agent" })
		if i < 0 {
			t.Fatal("no agent container")
		}
		agent := spec.Containers[i]
		var hostProc string
		for _, a := range agent.Args {
			if v, ok := strings.CutPrefix(a, "--host-proc="); ok {
				hostProc = v
			}
		}
		if hostProc == "" {
			t.Fatalf("agent args %q: no --host-proc", agent.Args)
		}
		host := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				host[v.Name] = v.HostPath.Path
			}
		}
		j := slices.IndexFunc(agent.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == hostProc })
		if j < 0 || host[agent.VolumeMounts[j].Name] != "/proc" || !agent.VolumeMounts[j].ReadOnly {
			t.Errorf("--host-proc=%s is not the host's /proc mounted read-only: %+v", hostProc, agent.VolumeMounts)
		}
		var caps []string
		if sc := agent.SecurityContext; sc != nil && sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				caps = append(caps, string(c))
			}
		}
		slices.Sort(caps)
		if want := []string{"NET_ADMIN", "SYS_ADMIN", "SYS_NICE", "SYS_PTRACE"}; !slices.Equal(caps, want) {
			t.Errorf("agent capabilities %v, want %v", caps, want)
		}
	})
	t.Run("systemd", func(t *testing.T) {
		u := shippedUnit(t, "iptables-alerter-agent.service")
		if !strings.Contains(u.last("Service", "ExecStart"), "--host-proc /proc") {
			t.Errorf("the unit does not run the agent with --host-proc /proc")
		}
		for _, hides := range []string{"PrivateNetwork", "ProtectProc", "ProcSubset", "PrivatePIDs", "PrivateUsers"} {
			if v, ok := u["Service"][hides]; ok {
				t.Errorf("the unit sets %s=%v: it hides the node's netns or the host's processes from the agent", hides, v)
			}
		}
		if !slices.Contains(u.list("Service", "CapabilityBoundingSet"), "CAP_SYS_PTRACE") {
			t.Errorf("CapabilityBoundingSet=%v: without CAP_SYS_PTRACE pid 1's netns stays closed", u.list("Service", "CapabilityBoundingSet"))
		}
	})
}
