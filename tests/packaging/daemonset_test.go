package packaging

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/inotifytest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// renderedDaemonSet is the DaemonSet of a kustomization, as kubectl
// kustomize renders it.
func renderedDaemonSet(t *testing.T, dir string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	rendered(t, dir, "DaemonSet", "iptables-alerter", &ds)
	return &ds
}

// eachDaemonSet runs f, as a subtest, on the pod spec of the DaemonSet
// of each kustomization that deploys it.
func eachDaemonSet(t *testing.T, f func(t *testing.T, spec corev1.PodSpec)) {
	for _, k := range []string{"packaging/kubernetes", "packaging/openshift"} {
		t.Run(filepath.Base(k), func(t *testing.T) { f(t, renderedDaemonSet(t, k).Spec.Template.Spec) })
	}
}

// rendered decodes the object of kind and name in a kustomization (a
// directory under the repo, or an absolute path), as kubectl kustomize
// renders it, into obj; a field obj does not have is an error.
func rendered(t *testing.T, dir, kind, name string, obj any) {
	t.Helper()
	render(t, dir, kind, name, obj, func(b []byte, o any) error { return yaml.UnmarshalStrict(b, o) })
}

// renderedLoose is rendered for an obj that holds only some fields (a
// custom resource's).
func renderedLoose(t *testing.T, dir, kind, name string, obj any) {
	t.Helper()
	render(t, dir, kind, name, obj, func(b []byte, o any) error { return yaml.Unmarshal(b, o) })
}

func render(t *testing.T, dir, kind, name string, obj any, decode func([]byte, any) error) {
	t.Helper()
	_, err := exec.LookPath("kubectl")
	nstest.Need(t, err == nil, "needs kubectl on PATH (tests/kube/build-kube.sh kubectl builds it into $IPTA_CACHE/kube/bin, which make puts first on PATH)")
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(repo(t), dir)
	}
	out, err := exec.Command("kubectl", "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var head struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("parse rendered object: %v", err)
		}
		if head.Kind != kind || head.Metadata.Name != name {
			continue
		}
		if err := decode([]byte(doc), obj); err != nil {
			t.Fatalf("parse %s %s: %v", kind, name, err)
		}
		return
	}
	t.Fatalf("no %s %s in %s", kind, name, dir)
}

// podmanArgs turns a container of the pod spec into `podman run` flags,
// with every hostPath volume under root (the scratch node): the
// container's args, env, user, capabilities, seccomp profile and read-only root as the
// kubelet would give them.
func podmanArgs(t *testing.T, spec corev1.PodSpec, c corev1.Container, root string) (flags, args []string) {
	t.Helper()
	host := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			host[v.Name] = v.HostPath.Path
		}
	}
	for _, m := range c.VolumeMounts {
		if _, ok := host[m.Name]; !ok {
			t.Fatalf("container %s mounts %s, not a hostPath volume", c.Name, m.Name)
		}
		src := filepath.Join(root, host[m.Name])
		if err := os.MkdirAll(src, 0o755); err != nil { // DirectoryOrCreate
			t.Fatal(err)
		}
		opt := src + ":" + m.MountPath
		if m.ReadOnly {
			opt += ":ro"
		}
		flags = append(flags, "-v", opt)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		flags = append(flags, "-e", e.Name+"="+e.Value)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil {
		t.Fatalf("container %s sets no runAsUser", c.Name)
	}
	flags = append(flags, "--user", strconv.FormatInt(*sc.RunAsUser, 10))
	if sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			flags = append(flags, "--cap-drop", string(d))
		}
		for _, a := range sc.Capabilities.Add {
			flags = append(flags, "--cap-add", string(a))
		}
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		flags = append(flags, "--read-only")
	}
	// RuntimeDefault on CRI-O is containers-common's profile, the one
	// podman uses; unset, the kubelet runs the container unconfined.
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault {
		flags = append(flags, "--security-opt", "seccomp=/usr/share/containers/seccomp.json")
	} else {
		flags = append(flags, "--security-opt", "seccomp=unconfined")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		flags = append(flags, "--security-opt", "no-new-privileges")
	}
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		args = append(args, a)
	}
	return flags, args
}

// openshiftCRIO is shaped like the drop-in OpenShift's CRI-O runs with.
const openshiftCRIO = "[crio.runtime]\nhooks_dir = [\n  \"/etc/containers/oci/hooks.d\",\n  \"/run/containers/oci/hooks.d\",\n  \"/usr/share/containers/oci/hooks.d\",\n]\n"

// testHookSidecar runs the DaemonSet's hook container, exactly as its
// manifest says, in podman against a scratch node; stopping it (the pod
// being deleted) removes the JSON, then the binary.
func testHookSidecar(t *testing.T, p *podman, image, kustomization, crioConf string) {
	ds := renderedDaemonSet(t, kustomization)
	spec := ds.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "hook" {
		t.Fatalf("init containers: want only hook, got %d", len(spec.InitContainers))
	}
	hook := spec.InitContainers[0]
	if hook.RestartPolicy == nil || *hook.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("hook is not a sidecar (restartPolicy Always): it would not be stopped after the others")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/crio/crio.conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/crio/crio.conf.d/00-default"), []byte(crioConf), 0o644); err != nil {
		t.Fatal(err)
	}
	flags, args := podmanArgs(t, spec, hook, root)
	var hooksDir string
	for _, e := range hook.Env {
		if e.Name == "HOOKS_DIR" {
			hooksDir = e.Value
		}
	}
	bin, hooks := filepath.Join(root, "usr/local/bin"), filepath.Join(root, hooksDir)
	for _, d := range []string{bin, hooks} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := inotifytest.New(t, bin, hooks)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := "hook-" + filepath.Base(kustomization)
	run := append([]string{"run", "-d", "--name", name, "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}, flags...)
	if out, err := p.cmd(ctx, append(append(run, image), args...)...).CombinedOutput(); err != nil {
		t.Fatalf("podman run %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	const bn, js = "iptables-alerter-hook", "iptables-alerter.json"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(hooks, js)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			logs, _ := p.cmd(ctx, "logs", name).CombinedOutput()
			t.Fatalf("no JSON in %s after 30 s; logs:\n%s", hooksDir, logs)
		}
	}
	mustMode(t, filepath.Join(bin, bn), 0o755)
	mustMode(t, filepath.Join(hooks, js), 0o644)
	if out, err := p.cmd(ctx, "stop", "-t", "20", name).CombinedOutput(); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, out)
	}
	logs, _ := p.cmd(ctx, "logs", name).CombinedOutput()
	if got := strings.Join(inotifytest.On(w.Read(), bn, js), "; "); got != "bin moved_to "+bn+"; hooks.d moved_to "+js+"; hooks.d delete "+js+"; bin delete "+bn {
		t.Errorf("events %q: want binary in, JSON in, JSON out, binary out; logs:\n%s", got, logs)
	}
	gone(t, filepath.Join(hooks, js), filepath.Join(bin, bn))
}
