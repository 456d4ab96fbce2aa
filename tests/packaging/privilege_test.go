package packaging

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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

// TestHostConfinement: on an SELinux host (CRI-O labels containers
// whenever SELinux is on, OpenShift or not) every container that uses
// host paths runs as spc_t, in every route; on an AppArmor node the agent
// runs unconfined, as the runtime's default profile refuses it the host's
// pid 1 (its netns, which the agent needs to start): the field from
// Kubernetes 1.30, the annotation in the chart for 1.29, neither in the
// OpenShift routes (RHCOS has no AppArmor; OpenShift 4.16's API server
// knows no field).
func TestHostConfinement(t *testing.T) {
	chart := func(kube string, set ...string) func(t *testing.T) *appsv1.DaemonSet {
		return func(t *testing.T) *appsv1.DaemonSet {
			objs := objects(t, helmTemplate(t, append([]string{"--kube-version=" + kube}, set...)...))
			data, err := json.Marshal(objs["DaemonSet/iptables-alerter/iptables-alerter"])
			if err != nil {
				t.Fatal(err)
			}
			var ds appsv1.DaemonSet
			if err := json.Unmarshal(data, &ds); err != nil {
				t.Fatal(err)
			}
			return &ds
		}
	}
	kust := func(dir string) func(t *testing.T) *appsv1.DaemonSet {
		return func(t *testing.T) *appsv1.DaemonSet { return renderedDaemonSet(t, dir) }
	}
	const field, annotation, none = "field", "annotation", "none"
	for _, tc := range []struct {
		name     string
		ds       func(t *testing.T) *appsv1.DaemonSet
		apparmor string
	}{
		{"kustomize base", kust("packaging/kubernetes"), field},
		{"kustomize prometheus-operator", kust("packaging/prometheus-operator"), field},
		{"kustomize openshift", kust("packaging/openshift"), none},
		{"kustomize openshift-no-sidecar", kust("packaging/openshift-no-sidecar"), none},
		{"chart 1.35", chart(chartKubeVersion), field},
		{"chart 1.29", chart("1.29.5"), annotation},
		{"chart openshift", chart(chartKubeVersion, "openshift.enabled=true"), none},
		{"chart openshift 1.29", chart("1.29.5", "openshift.enabled=true"), none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := tc.ds(t)
			spec := ds.Spec.Template.Spec
			hostPaths := map[string]bool{}
			for _, v := range spec.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = true
				}
			}
			got := none
			for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
				sc := c.SecurityContext
				onHost := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return hostPaths[m.Name] })
				if spc := sc != nil && sc.SELinuxOptions != nil && sc.SELinuxOptions.Type == "spc_t"; onHost && !spc {
					t.Errorf("%s uses host paths without SELinux type spc_t", c.Name)
				}
				if sc != nil && sc.AppArmorProfile != nil {
					if c.Name != "agent" || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
						t.Errorf("%s: AppArmor profile %+v: want the agent's alone, unconfined", c.Name, sc.AppArmorProfile)
					}
					got = field
				}
			}
			for k, v := range ds.Spec.Template.Annotations {
				if strings.HasPrefix(k, "container.apparmor.security.beta.kubernetes.io/") {
					if k != "container.apparmor.security.beta.kubernetes.io/agent" || v != "unconfined" || got != none {
						t.Errorf("annotation %s=%s (and the field: %s)", k, v, got)
					}
					got = annotation
				}
			}
			if sc := spec.SecurityContext; sc != nil && (sc.AppArmorProfile != nil || sc.SELinuxOptions != nil) {
				t.Errorf("pod-wide AppArmor %+v or SELinux %+v: want them per container", sc.AppArmorProfile, sc.SELinuxOptions)
			}
			if got != tc.apparmor {
				t.Errorf("the agent's AppArmor profile is set by %s, want %s", got, tc.apparmor)
			}
		})
	}
}

// TestTextfileContainerConfinement: the container an admin adds to
// node-exporter's DaemonSet reads and writes host paths (the findings, its
// checkpoint, the textfile directory) as the DaemonSet's containers do, so
// it needs what they have: on an SELinux node container_t may touch none
// of those directories, and every container runs under the runtime's
// default seccomp profile (README).
func TestTextfileContainerConfinement(t *testing.T) {
	for _, c := range textfileContainers(t) {
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("%s: no securityContext", c.Name)
		}
		if sc.SELinuxOptions == nil || sc.SELinuxOptions.Type != "spc_t" {
			t.Errorf("%s uses host paths without SELinux type spc_t: %+v", c.Name, sc.SELinuxOptions)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccompProfile %+v, want RuntimeDefault", c.Name, sc.SeccompProfile)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation not false", c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities %+v, want all dropped, none added", c.Name, sc.Capabilities)
		}
	}
}
