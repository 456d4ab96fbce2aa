package packaging

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestLeastPrivilege: in both DaemonSets every container runs under the
// runtime's default seccomp profile (the agent's setns included: allowed
// with CAP_SYS_ADMIN) and no container gets the ServiceAccount token by
// automount: the forwarder alone mounts it, by its own volume.
func TestLeastPrivilege(t *testing.T) {
	eachDaemonSet(t, func(t *testing.T, spec corev1.PodSpec) {
		if a := spec.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("automountServiceAccountToken unset or true, want false")
		}
		if sc := spec.SecurityContext; sc != nil && sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod seccompProfile %+v", sc.SeccompProfile)
		}
		cs := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
		if len(cs) != 3 {
			t.Errorf("%d containers, want hook, agent, forward", len(cs))
		}
		for _, c := range cs {
			sc := c.SecurityContext
			if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: seccompProfile is not RuntimeDefault", c.Name)
			}
			if sc == nil || sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: privileged", c.Name)
			}
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allowPrivilegeEscalation not false", c.Name)
			}
			for _, m := range c.VolumeMounts {
				if m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" && c.Name != "forward" {
					t.Errorf("%s mounts the ServiceAccount token", c.Name)
				}
			}
		}
	})
}
