package packaging

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// secureOverlay writes, outside the repo, the kustomization
// packaging/secure-metrics tells a Kubernetes admin to write: the base
// with the monitoring component and the secure-metrics one.
func secureOverlay(t *testing.T) string {
	t.Helper()
	return ownOverlay(t, "", "packaging/kubernetes", "packaging/kubernetes/components/monitoring", "packaging/secure-metrics")
}

// ownOverlay writes an admin's kustomization outside the repository: the
// base, then the components in order, then extra (more fields, as YAML).
func ownOverlay(t *testing.T, extra, base string, components ...string) string {
	t.Helper()
	dir := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(dir, filepath.Join(repo(t), p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel(base) + "]\n"
	if len(components) > 0 {
		var cs []string
		for _, c := range components {
			cs = append(cs, rel(c))
		}
		k += "components: [" + strings.Join(cs, ", ") + "]\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// argValue gives the value of --name=V in args, and whether it is there.
func argValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no %s container", name)
	}
	return spec.Containers[i]
}

// TestMetricsReach: who may connect to which port, in each way the
// manifests can be applied. The pods are not hostNetwork (a NetworkPolicy
// would not apply); the policy admits exactly the port the Service names,
// only from the monitoring namespaces; with metrics behind TLS the agent's
// /metrics is on localhost only, reached by the forwarder, which serves it
// over TLS with the Secret's certificate, and the ServiceMonitor scrapes
// paths the reader ClusterRole grants; the ServiceAccount's token is
// mounted into the forwarder alone.
func TestMetricsReach(t *testing.T) {
	cases := []struct {
		name, dir string
		secure    bool
		from      []string
		ports     []int32
	}{
		// Plain: the agent's 9757 and the forwarder's 9756, each serving
		// its own /metrics.
		{name: "kubernetes", dir: "packaging/prometheus-operator", from: []string{"monitoring"}, ports: []int32{9757, 9756}},
		{name: "kubernetes with secure-metrics", secure: true, from: []string{"monitoring"}, ports: []int32{9443}},
		{name: "openshift", dir: "packaging/openshift", secure: true, from: []string{"openshift-monitoring", "openshift-user-workload-monitoring"}, ports: []int32{9443}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir
			if dir == "" {
				dir = secureOverlay(t)
			}
			spec := renderedDaemonSet(t, dir).Spec.Template.Spec
			if spec.HostNetwork {
				t.Fatal("the DaemonSet is hostNetwork: the NetworkPolicy would not apply")
			}

			var np networkingv1.NetworkPolicy
			rendered(t, dir, "NetworkPolicy", "iptables-alerter", &np)
			if len(np.Spec.Ingress) != 1 {
				t.Fatalf("%d ingress rules, want 1", len(np.Spec.Ingress))
			}
			rule := np.Spec.Ingress[0]
			var from []string
			for _, p := range rule.From {
				if p.PodSelector != nil || p.IPBlock != nil || p.NamespaceSelector == nil || len(p.NamespaceSelector.MatchExpressions) > 0 ||
					len(p.NamespaceSelector.MatchLabels) != 1 || p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "" {
					t.Fatalf("ingress peer %+v: want a namespace selected by its name label only", p)
				}
				from = append(from, p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
			}
			if !slices.Equal(from, tc.from) {
				t.Errorf("ingress from namespaces %v, want %v", from, tc.from)
			}
			var admitted []int32
			for _, p := range rule.Ports {
				if p.Port == nil {
					t.Fatalf("ingress port %+v: want a number", p)
				}
				admitted = append(admitted, p.Port.IntVal)
			}
			if !slices.Equal(admitted, tc.ports) {
				t.Errorf("ingress ports %v, want only %v", admitted, tc.ports)
			}

			// The Service's port is the admitted one.
			var svc corev1.Service
			rendered(t, dir, "Service", "iptables-alerter-metrics", &svc)
			// servers maps each Service port's name to the container
			// serving it; every one is admitted, and nothing else.
			servers := map[string]string{}
			var served []int32
			for _, sp := range svc.Spec.Ports {
				for _, c := range spec.Containers {
					for _, p := range c.Ports {
						if p.Name == sp.TargetPort.StrVal {
							servers[sp.Name] = c.Name
							served = append(served, p.ContainerPort)
						}
					}
				}
			}
			if !slices.Equal(served, tc.ports) {
				t.Errorf("the Service targets ports %v, the policy admits %v", served, tc.ports)
			}
			server := servers[svc.Spec.Ports[0].Name]

			// The token: the forwarder's alone.
			if a := spec.AutomountServiceAccountToken; a == nil || *a {
				t.Error("automountServiceAccountToken is not false: every container would get the forwarder's token")
			}
			tokenVol := ""
			for _, v := range spec.Volumes {
				if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil }) {
					tokenVol = v.Name
				}
			}
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				mounts := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == tokenVol && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
				})
				if mounts != (c.Name == "forward") {
					t.Errorf("container %s mounts the token: %v", c.Name, mounts)
				}
			}

			agent, fwd := container(t, spec, "agent"), container(t, spec, "forward")
			// /healthz is on the pod's IP only where /metrics is on the
			// same plain port; behind TLS on loopback
			// (TestHealthOnLoopback). The kubelet's probes exec on
			// --probe-addr either way.
			wantHealth := ":9757"
			if tc.secure {
				wantHealth = "127.0.0.1:9757"
			}
			if h, _ := argValue(agent.Args, "health-addr"); h != wantHealth {
				t.Errorf("agent --health-addr=%q, want %s", h, wantHealth)
			}
			var sm struct {
				Spec struct {
					Endpoints []struct {
						Port, Path, Scheme string
						TLSConfig          struct{ ServerName string } `json:"tlsConfig"`
					}
				}
			}
			renderedLoose(t, dir, "ServiceMonitor", "iptables-alerter", &sm)
			metricsAddr, hasMetrics := argValue(agent.Args, "metrics-addr")
			if !tc.secure {
				if hasMetrics || servers["metrics"] != "agent" || servers["forward-metrics"] != "forward" {
					t.Errorf("plain metrics: agent --metrics-addr=%q, Service ports to %v", metricsAddr, servers)
				}
				if len(sm.Spec.Endpoints) != 2 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[1].Port != "forward-metrics" {
					t.Errorf("ServiceMonitor endpoints %+v", sm.Spec.Endpoints)
				}
				return
			}
			host, _, err := net.SplitHostPort(metricsAddr)
			if err != nil || host != "127.0.0.1" {
				t.Errorf("agent --metrics-addr=%q, want localhost only", metricsAddr)
			}
			if v, _ := argValue(fwd.Args, "agent-metrics"); v != "http://"+metricsAddr+"/metrics" {
				t.Errorf("forward --agent-metrics=%q, agent --metrics-addr=%q", v, metricsAddr)
			}
			if v, _ := argValue(fwd.Args, "secure-metrics-addr"); v != ":"+strconv.Itoa(int(tc.ports[0])) || server != "forward" {
				t.Errorf("forward --secure-metrics-addr=%q, Service to %s", v, server)
			}
			secrets := map[string]string{}
			for _, v := range spec.Volumes {
				if v.Secret != nil {
					secrets[v.Name] = v.Secret.SecretName
				}
			}
			for _, f := range []string{"tls-cert-file", "tls-private-key-file"} {
				v, _ := argValue(fwd.Args, f)
				i := slices.IndexFunc(fwd.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == filepath.Dir(v) })
				if i < 0 || secrets[fwd.VolumeMounts[i].Name] != "iptables-alerter-metrics-tls" {
					t.Errorf("forward --%s=%q is not in the mounted Secret iptables-alerter-metrics-tls", f, v)
				}
			}
			if a, ok := svc.Annotations["service.beta.openshift.io/serving-cert-secret-name"]; (tc.name == "openshift") != ok || ok && a != "iptables-alerter-metrics-tls" {
				t.Errorf("Service serving-cert annotation %q", a)
			}
			var reader rbacv1.ClusterRole
			rendered(t, dir, "ClusterRole", "iptables-alerter-metrics-reader", &reader)
			var paths []string
			for _, e := range sm.Spec.Endpoints {
				if e.Port != svc.Spec.Ports[0].Name || e.Scheme != "https" || e.TLSConfig.ServerName != svc.Name+"."+svc.Namespace+".svc" {
					t.Errorf("ServiceMonitor endpoint %+v: want https to %s, server name %s.%s.svc", e, svc.Spec.Ports[0].Name, svc.Name, svc.Namespace)
				}
				paths = append(paths, e.Path)
			}
			slices.Sort(paths)
			if len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].NonResourceURLs, paths) || !slices.Equal(reader.Rules[0].Verbs, []string{"get"}) {
				t.Errorf("reader ClusterRole %+v, ServiceMonitor paths %v", reader.Rules, paths)
			}
			var review rbacv1.ClusterRoleBinding
			rendered(t, dir, "ClusterRoleBinding", "iptables-alerter-forward-review", &review)
			if len(review.Subjects) != 1 || review.Subjects[0].Name != spec.ServiceAccountName {
				t.Errorf("review binding subjects %+v, want the pod's ServiceAccount %s", review.Subjects, spec.ServiceAccountName)
			}
		})
	}
}

// TestHealthOnLoopback: where the metrics are behind TLS (the base with
// the secure-metrics component, the OpenShift overlays, which use it, and
// the chart with metrics.secure or openshift) every container's /healthz
// (--health-addr, and its --probe-addr) listens on loopback only, and no
// containerPort, Service port or NetworkPolicy port names a health port:
// the forwarder's degraded text names namespaces, and where no
// NetworkPolicy is enforced anyone reaching the pod's IP would read it.
// The kubelet's probes exec on --probe-addr (TestProbes), and 9443 is the
// one port left. The textfile container, for node-exporter's usually
// hostNetwork pod, binds its health port to loopback too.
func TestHealthOnLoopback(t *testing.T) {
	for _, tc := range []struct {
		name string
		// dir is a kustomization under the repo, or "secure-metrics"
		// (the base with that component); empty: the chart with set.
		dir string
		set []string
	}{
		{name: "secure-metrics", dir: "secure-metrics"},
		{name: "openshift", dir: "packaging/openshift"},
		{name: "openshift-no-sidecar", dir: "packaging/openshift-no-sidecar"},
		{name: "openshift-user-workload", dir: "packaging/openshift-user-workload"},
		{name: "helm metrics.secure", set: withAPI("metrics.secure.enabled=true")},
		{name: "helm metrics.secure without agent", set: withAPI("metrics.secure.enabled=true", "agent.enabled=false")},
		{name: "helm openshift", set: withAPI("openshift.enabled=true")},
		{name: "helm openshift without hook", set: withAPI("openshift.enabled=true", "hook.enabled=false")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs map[string]map[string]any
			switch tc.dir {
			case "":
				objs = objects(t, helmTemplate(t, tc.set...))
			case "secure-metrics":
				objs = objects(t, kustomize(t, secureOverlay(t)))
			default:
				objs = objects(t, kustomize(t, filepath.Join(repo(t), tc.dir)))
			}
			spec := daemonSetPod(t, objs)
			health := checkHealthLoopback(t, spec.Containers, "agent", "forward")
			// byName resolves a named port to the container port it is.
			byName := map[string]int32{}
			for _, c := range spec.Containers {
				for _, p := range c.Ports {
					if health[p.ContainerPort] {
						t.Errorf("container %s: containerPort %d %q is a health port", c.Name, p.ContainerPort, p.Name)
					}
					byName[p.Name] = p.ContainerPort
				}
			}
			var svc corev1.Service
			if !decoded(t, objs, "Service/iptables-alerter/iptables-alerter-metrics", &svc) {
				t.Fatal("no metrics Service")
			}
			svcPorts := map[string]bool{}
			for _, p := range svc.Spec.Ports {
				target := p.TargetPort.IntVal
				if p.TargetPort.StrVal != "" {
					target = byName[p.TargetPort.StrVal]
				}
				if health[p.Port] || health[target] {
					t.Errorf("Service port %+v reaches a health port", p)
				}
				svcPorts[p.Name] = true
			}
			var np networkingv1.NetworkPolicy
			if !decoded(t, objs, "NetworkPolicy/iptables-alerter/iptables-alerter", &np) {
				t.Fatal("no NetworkPolicy")
			}
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					if p.Port != nil && (health[p.Port.IntVal] || health[byName[p.Port.StrVal]]) {
						t.Errorf("NetworkPolicy admits health port %s", p.Port)
					}
				}
			}
			// The ServiceMonitor scrapes the Service's ports, none else.
			var sm struct {
				Spec struct{ Endpoints []smEndpoint }
			}
			if !decoded(t, objs, "ServiceMonitor/iptables-alerter/iptables-alerter", &sm) {
				t.Fatal("no ServiceMonitor")
			}
			for _, e := range sm.Spec.Endpoints {
				if !svcPorts[e.Port] {
					t.Errorf("ServiceMonitor endpoint %s %s: not a port of the Service %v", e.Port, e.Path, svcPorts)
				}
			}
		})
	}
	t.Run("textfile container", func(t *testing.T) {
		checkHealthLoopback(t, textfileContainers(t), "iptables-alerter-textfile")
	})
}

// checkHealthLoopback: each container's --health-addr and --probe-addr are
// on loopback, and each container named in want, where it runs, has a
// --health-addr (the check is not passed by a flag left out). It gives
// the ports they listen on.
func checkHealthLoopback(t *testing.T, containers []corev1.Container, want ...string) map[int32]bool {
	t.Helper()
	ports := map[int32]bool{}
	for _, c := range containers {
		for _, flag := range []string{"health-addr", "probe-addr"} {
			addr, ok := argValue(c.Args, flag)
			if !ok {
				if flag == "health-addr" && slices.Contains(want, c.Name) {
					t.Errorf("container %s: no --health-addr", c.Name)
				}
				continue
			}
			host, port, err := net.SplitHostPort(addr)
			ip := net.ParseIP(host)
			if err != nil || ip == nil || !ip.IsLoopback() {
				t.Errorf("container %s: --%s=%s, want a loopback address (127.0.0.1:PORT)", c.Name, flag, addr)
			}
			if n, err := strconv.ParseInt(port, 10, 32); err == nil {
				ports[int32(n)] = true
			}
		}
	}
	return ports
}
