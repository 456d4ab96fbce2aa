package critest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pod is a pod sandbox the test ran.
type Pod struct {
	ID     string
	Name   string
	UID    string
	Config *rt.PodSandboxConfig
}

// callTimeout bounds one CRI call, as the kubelet's runtime request
// timeout does (2 min there; the tests want a failure sooner).
const callTimeout = 60 * time.Second

// RunPod runs a pod sandbox with the labels and annotations the kubelet
// gives it, in namespace "ipta-test"; hostNetwork puts it in the runtime's
// (the test's) netns instead of a netns of its own.
func (c *CRI) RunPod(name string, hostNetwork bool) *Pod {
	c.t.Helper()
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", time.Now().UnixNano()&0xffffffff, time.Now().UnixNano()&0xffffffffffff)
	mode, hostname := rt.NamespaceMode_POD, name
	if hostNetwork {
		// The kubelet sets no hostname then: the pod shares the node's UTS.
		mode, hostname = rt.NamespaceMode_NODE, ""
	}
	cfg := &rt.PodSandboxConfig{
		Metadata:     &rt.PodSandboxMetadata{Name: name, Uid: uid, Namespace: "ipta-test", Attempt: 0},
		Hostname:     hostname,
		LogDirectory: filepath.Join(c.Dir, "logs", "pods", "ipta-test_"+name+"_"+uid),
		Labels: map[string]string{
			"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "ipta-test", "io.kubernetes.pod.uid": uid,
			"app": name,
		},
		Annotations: map[string]string{
			"kubernetes.io/config.source": "api",
			"kubernetes.io/config.seen":   time.Now().UTC().Format(time.RFC3339Nano),
		},
		Linux: &rt.LinuxPodSandboxConfig{
			SecurityContext: &rt.LinuxSandboxSecurityContext{
				NamespaceOptions: &rt.NamespaceOption{Network: mode, Pid: rt.NamespaceMode_CONTAINER, Ipc: rt.NamespaceMode_POD},
			},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r, err := c.Runtime.RunPodSandbox(ctx, &rt.RunPodSandboxRequest{Config: cfg, RuntimeHandler: ""})
	if err != nil {
		c.t.Fatalf("RunPodSandbox %s: %v; %s log: %s", name, err, c.name, c.Log())
	}
	return &Pod{ID: r.PodSandboxId, Name: name, UID: uid, Config: cfg}
}

// CreateContainer creates a container in the pod with the kubelet's labels
// and annotations, CAP_NET_ADMIN (what a pod writing iptables rules has),
// running sh -c script. It returns the container id.
func (c *CRI) CreateContainer(p *Pod, name, script string) string {
	c.t.Helper()
	return c.CreateContainerConfig(p, ContainerConfig(p, name, script))
}

// ContainerConfig is what CreateContainer asks for, for a caller that
// changes it before CreateContainerConfig.
func ContainerConfig(p *Pod, name, script string) *rt.ContainerConfig {
	return &rt.ContainerConfig{
		Metadata: &rt.ContainerMetadata{Name: name},
		// The kubelet passes the image the pod spec names, besides the
		// resolved one; CRI-O verifies signatures against it.
		Image:   &rt.ImageSpec{Image: ImageRef, UserSpecifiedImage: ImageRef},
		Command: []string{"/bin/sh", "-c", script},
		LogPath: name + "/0.log",
		Labels: map[string]string{
			"io.kubernetes.container.name": name, "io.kubernetes.pod.name": p.Name,
			"io.kubernetes.pod.namespace": "ipta-test", "io.kubernetes.pod.uid": p.UID,
		},
		Annotations: map[string]string{
			"io.kubernetes.container.hash":                     strconv.Itoa(len(script)),
			"io.kubernetes.container.restartCount":             "0",
			"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": "File",
			"io.kubernetes.pod.terminationGracePeriod":         "30",
		},
		Linux: &rt.LinuxContainerConfig{
			SecurityContext: &rt.LinuxContainerSecurityContext{
				Capabilities:     &rt.Capability{AddCapabilities: []string{"NET_ADMIN", "NET_RAW"}},
				NamespaceOptions: p.Config.Linux.SecurityContext.NamespaceOptions,
			},
		},
	}
}

// CreateContainerConfig creates a container in the pod as cfg says and
// returns its id.
func (c *CRI) CreateContainerConfig(p *Pod, cfg *rt.ContainerConfig) string {
	c.t.Helper()
	name := cfg.Metadata.Name
	// The kubelet makes the container's log directory; conmon does not.
	if err := os.MkdirAll(filepath.Join(p.Config.LogDirectory, name), 0o755); err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r, err := c.Runtime.CreateContainer(ctx, &rt.CreateContainerRequest{PodSandboxId: p.ID, Config: cfg, SandboxConfig: p.Config})
	if err != nil {
		c.t.Fatalf("CreateContainer %s/%s: %v; %s log: %s", p.Name, name, err, c.name, c.Log())
	}
	return r.ContainerId
}

// StartContainer starts a created container.
func (c *CRI) StartContainer(id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := c.Runtime.StartContainer(ctx, &rt.StartContainerRequest{ContainerId: id}); err != nil {
		c.t.Fatalf("StartContainer %s: %v; %s log: %s", id, err, c.name, c.Log())
	}
}

// Run creates and starts a container, as the kubelet does for each one.
func (c *CRI) Run(p *Pod, name, script string) string {
	c.t.Helper()
	id := c.CreateContainer(p, name, script)
	c.StartContainer(id)
	return id
}

// WaitExited waits until the container exited (an init container) and
// returns its exit code.
func (c *CRI) WaitExited(id string) int32 {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		st, err := c.Runtime.ContainerStatus(ctx, &rt.ContainerStatusRequest{ContainerId: id})
		cancel()
		if err != nil {
			c.t.Fatalf("ContainerStatus %s: %v", id, err)
		}
		if st.Status.State == rt.ContainerState_CONTAINER_EXITED {
			return st.Status.ExitCode
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("container %s still %v", id, st.Status.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopContainer stops a container with the kubelet's grace period.
func (c *CRI) StopContainer(id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := c.Runtime.StopContainer(ctx, &rt.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
		c.t.Fatalf("StopContainer %s: %v", id, err)
	}
}

// StopPod stops the pod sandbox (the runtime tears the netns down). Its
// containers are stopped first with a grace of 2 s: CRI-O gives a pod
// stop's containers the whole call's deadline as their grace, and a
// container stopped right after its start, its shell not yet past its
// `trap`, ignores SIGTERM (pid 1 of its pid namespace): the stop then
// ran to the deadline and failed (loaded CI of 00a1a4f,
// TestCRIONotReadySandbox). Every container not yet exited is stopped so
// (one still created, or whose state the runtime has not yet updated,
// too), and each call has its own deadline, as the kubelet's: the sandbox
// stop still ran out of its shared one on a loaded CI of 0700bfd. A
// failure says how long each step took.
func (c *CRI) StopPod(p *Pod) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	l, err := c.Runtime.ListContainers(ctx, &rt.ListContainersRequest{Filter: &rt.ContainerFilter{PodSandboxId: p.ID}})
	cancel()
	if err != nil {
		c.t.Fatalf("ListContainers of %s: %v", p.Name, err)
	}
	var steps []string
	for _, ct := range l.Containers {
		if ct.State == rt.ContainerState_CONTAINER_EXITED {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		start := time.Now()
		_, err := c.Runtime.StopContainer(ctx, &rt.StopContainerRequest{ContainerId: ct.Id, Timeout: 2})
		cancel()
		steps = append(steps, fmt.Sprintf("StopContainer %s (%s) %s", ct.Id, ct.State, time.Since(start).Round(time.Millisecond)))
		if err != nil {
			c.t.Fatalf("StopContainer %s of %s: %v (%s)", ct.Id, p.Name, err, strings.Join(steps, ", "))
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	start := time.Now()
	if _, err := c.Runtime.StopPodSandbox(ctx, &rt.StopPodSandboxRequest{PodSandboxId: p.ID}); err != nil {
		steps = append(steps, fmt.Sprintf("StopPodSandbox %s", time.Since(start).Round(time.Millisecond)))
		c.t.Fatalf("StopPodSandbox %s: %v (%s)", p.Name, err, strings.Join(steps, ", "))
	}
}

// RemovePod removes a stopped pod sandbox and its containers.
func (c *CRI) RemovePod(p *Pod) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := c.Runtime.RemovePodSandbox(ctx, &rt.RemovePodSandboxRequest{PodSandboxId: p.ID}); err != nil {
		c.t.Fatalf("RemovePodSandbox %s: %v", p.Name, err)
	}
}

// NetnsPath is the pod's pinned netns, from the verbose sandbox status (the
// CRI fallback reads it the same way).
func (c *CRI) NetnsPath(p *Pod) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	st, err := c.Runtime.PodSandboxStatus(ctx, &rt.PodSandboxStatusRequest{PodSandboxId: p.ID, Verbose: true})
	if err != nil {
		c.t.Fatalf("PodSandboxStatus %s: %v", p.Name, err)
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		}
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		c.t.Fatalf("sandbox status info: %v", err)
	}
	for _, ns := range info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			return ns.Path
		}
	}
	return ""
}
