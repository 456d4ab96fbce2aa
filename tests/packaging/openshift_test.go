package packaging

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// scc is the part of OpenShift's SecurityContextConstraints the overlay
// sets (security.openshift.io/v1; its fields are at the top level).
type scc struct {
	Kind                            string
	AllowPrivilegedContainer        bool     `json:"allowPrivilegedContainer"`
	AllowPrivilegeEscalation        *bool    `json:"allowPrivilegeEscalation"`
	AllowHostDirVolumePlugin        bool     `json:"allowHostDirVolumePlugin"`
	AllowHostNetwork                bool     `json:"allowHostNetwork"`
	AllowHostPID                    bool     `json:"allowHostPID"`
	AllowHostIPC                    bool     `json:"allowHostIPC"`
	AllowHostPorts                  bool     `json:"allowHostPorts"`
	ReadOnlyRootFilesystem          bool     `json:"readOnlyRootFilesystem"`
	AllowedCapabilities             []string `json:"allowedCapabilities"`
	RequiredDropCapabilities        []string `json:"requiredDropCapabilities"`
	DefaultAddCapabilities          []string `json:"defaultAddCapabilities"`
	SeccompProfiles                 []string `json:"seccompProfiles"`
	Volumes                         []string `json:"volumes"`
	Users                           []string `json:"users"`
	Groups                          []string `json:"groups"`
	DefaultAllowPrivilegeEscalation *bool    `json:"defaultAllowPrivilegeEscalation"`
	RunAsUser                       struct{ Type string }
	SELinuxContext                  struct{ Type string } `json:"seLinuxContext"`
}

// volumeType is the SCC name of a pod volume's type.
func volumeType(v corev1.Volume) string {
	switch {
	case v.HostPath != nil:
		return "hostPath"
	case v.Projected != nil:
		return "projected"
	case v.Secret != nil:
		return "secret"
	case v.ConfigMap != nil:
		return "configMap"
	case v.DownwardAPI != nil:
		return "downwardAPI"
	case v.EmptyDir != nil:
		return "emptyDir"
	}
	return "other"
}

// TestSCC: the OpenShift overlays run under their own SCC, which admits
// their DaemonSet (as OpenShift's admission checks a pod against it) and
// nothing wider: no privileged container, no escalation, no host
// network, IPC or ports (the host's pid namespace only, for the exec
// watch), only the agent's three capabilities, the volume
// types the pod uses, the runtime's seccomp profile; granted to the
// ServiceAccount by RBAC alone. SELinux's spc_t is set on each container
// that uses host paths, never pod-wide.
func TestSCC(t *testing.T) {
	for _, dir := range []string{"packaging/openshift", "packaging/openshift-no-sidecar"} {
		t.Run(dir, func(t *testing.T) {
			var c scc
			renderedLoose(t, dir, "SecurityContextConstraints", "iptables-alerter", &c)
			if c.AllowPrivilegedContainer || c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation ||
				c.DefaultAllowPrivilegeEscalation == nil || *c.DefaultAllowPrivilegeEscalation ||
				c.AllowHostNetwork || c.AllowHostIPC || c.AllowHostPorts || !c.ReadOnlyRootFilesystem {
				t.Errorf("SCC allows more than the DaemonSet needs: %+v", c)
			}
			if len(c.Users) > 0 || len(c.Groups) > 0 || len(c.DefaultAddCapabilities) > 0 {
				t.Errorf("SCC users %v groups %v default capabilities %v: want none (RBAC grants it)", c.Users, c.Groups, c.DefaultAddCapabilities)
			}
			if !slices.Equal(c.RequiredDropCapabilities, []string{"ALL"}) || !slices.Equal(c.SeccompProfiles, []string{"runtime/default"}) {
				t.Errorf("SCC drops %v, seccomp %v: want ALL, runtime/default", c.RequiredDropCapabilities, c.SeccompProfiles)
			}
			ds := renderedDaemonSet(t, dir)
			if ds.Spec.Template.Annotations["openshift.io/required-scc"] != "iptables-alerter" {
				t.Errorf("pod annotation openshift.io/required-scc %q: want iptables-alerter", ds.Spec.Template.Annotations["openshift.io/required-scc"])
			}
			spec := ds.Spec.Template.Spec
			if spec.HostNetwork || spec.HostIPC {
				t.Errorf("pod uses host namespaces")
			}
			// The exec watch's one host namespace, and the SCC admits it.
			if !spec.HostPID || !c.AllowHostPID {
				t.Errorf("hostPID %v, SCC allowHostPID %v: the agent's exec watch needs both", spec.HostPID, c.AllowHostPID)
			}
			if sc := spec.SecurityContext; sc != nil && sc.SELinuxOptions != nil {
				t.Errorf("pod-wide seLinuxOptions %+v: want them per container", sc.SELinuxOptions)
			}
			used := map[string]bool{}
			for _, v := range spec.Volumes {
				used[volumeType(v)] = true
				if !slices.Contains(c.Volumes, volumeType(v)) {
					t.Errorf("volume %s of type %s: the SCC does not admit it", v.Name, volumeType(v))
				}
			}
			for _, v := range c.Volumes {
				if !used[v] && !(v == "configMap" || v == "downwardAPI") { // the projected volume's sources
					t.Errorf("SCC admits volume type %s, which the pod does not use", v)
				}
			}
			if used["hostPath"] != c.AllowHostDirVolumePlugin {
				t.Errorf("allowHostDirVolumePlugin %v, pod uses hostPath %v", c.AllowHostDirVolumePlugin, used["hostPath"])
			}
			hostPaths := map[string]bool{}
			for _, v := range spec.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = true
				}
			}
			var needed []string
			for _, ctr := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
				sc := ctr.SecurityContext
				if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
					t.Errorf("%s: does not drop ALL", ctr.Name)
					continue
				}
				for _, a := range sc.Capabilities.Add {
					if !slices.Contains(c.AllowedCapabilities, string(a)) {
						t.Errorf("%s: adds %s, which the SCC does not allow", ctr.Name, a)
					}
					if !slices.Contains(needed, string(a)) {
						needed = append(needed, string(a))
					}
				}
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Privileged != nil && *sc.Privileged {
					t.Errorf("%s: writable root or privileged", ctr.Name)
				}
				onHost := slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return hostPaths[m.Name] })
				spc := sc.SELinuxOptions != nil && sc.SELinuxOptions.Type == "spc_t"
				if onHost != spc {
					t.Errorf("%s: spc_t %v, uses host paths %v: want spc_t exactly where host paths are", ctr.Name, spc, onHost)
				}
			}
			slices.Sort(needed)
			allowed := slices.Sorted(slices.Values(c.AllowedCapabilities))
			if !slices.Equal(needed, allowed) {
				t.Errorf("SCC allows %v, the containers add %v", allowed, needed)
			}
			if c.RunAsUser.Type != "RunAsAny" || c.SELinuxContext.Type != "RunAsAny" {
				t.Errorf("runAsUser %s seLinuxContext %s", c.RunAsUser.Type, c.SELinuxContext.Type)
			}
		})
	}
}

// TestNoSidecar: the no-hook component takes the hook container and the
// volumes only it mounts off the DaemonSet, and leaves the other
// containers as they are: in the overlay for nodes whose hook the
// MachineConfig installs, and on the plain base (containerd-only nodes
// with a read-only /usr, where the kubelet could not create the hooks
// directory and the pod would not start).
func TestNoSidecar(t *testing.T) {
	for _, tc := range []struct{ name, with, without string }{
		{"openshift-no-sidecar", "packaging/openshift", "packaging/openshift-no-sidecar"},
		{"kubernetes with components/no-hook", "packaging/kubernetes", ownOverlay(t, "", "packaging/kubernetes", "packaging/kubernetes/components/no-hook")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			with := renderedDaemonSet(t, tc.with).Spec.Template.Spec
			without := renderedDaemonSet(t, tc.without).Spec.Template.Spec
			if len(without.InitContainers) != 0 {
				t.Errorf("init containers %d, want none", len(without.InitContainers))
			}
			mounted := map[string]bool{}
			for _, c := range without.Containers {
				for _, m := range c.VolumeMounts {
					mounted[m.Name] = true
				}
			}
			for _, v := range without.Volumes {
				if !mounted[v.Name] {
					t.Errorf("volume %s: no container mounts it", v.Name)
				}
				if h := v.HostPath; h != nil && (strings.HasPrefix(h.Path, "/usr/") || strings.HasPrefix(h.Path, "/etc/crio")) {
					t.Errorf("volume %s: host path %s kept", v.Name, h.Path)
				}
			}
			for _, v := range with.Volumes {
				if mounted[v.Name] != slices.ContainsFunc(without.Volumes, func(w corev1.Volume) bool { return w.Name == v.Name }) {
					t.Errorf("volume %s: kept %v, mounted %v", v.Name, !mounted[v.Name], mounted[v.Name])
				}
			}
			if diff := cmp.Diff(with.Containers, without.Containers); diff != "" {
				t.Errorf("containers differ from %s's (-with +without):\n%s", tc.with, diff)
			}
		})
	}
}
