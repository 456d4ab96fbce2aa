package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// The CRI fallback, for runtimes with NRI off (CRI-O before 1.30 by
// default, containerd 1.7): every interval, list the pod sandboxes through
// the runtime's CRI socket and sweep each pod netns, in-process, skipping
// those unchanged since their last complete scan (see resweep.go). It sees
// only what a sweep sees: no moment of a container's start or stop.

// StageCRI is the stage of the fallback's findings (source "sweep").
const StageCRI = "CRI"

// criTimeout bounds one CRI call.
const criTimeout = 30 * time.Second

// maxInfo bounds the verbose status read per sandbox: it carries the whole
// runtime spec, with the pod's annotations.
const maxInfo = 4 << 20

// RunCRI sweeps every interval through the CRI at endpoint (a socket path
// or unix:// URL) until ctx ends. A runtime that does not answer is
// reported and tried again at the next interval.
func (a *Agent) RunCRI(ctx context.Context, endpoint string, interval time.Duration) error {
	if endpoint == "" || interval <= 0 {
		return fmt.Errorf("%w: CRI endpoint %q, interval %v", ErrConfig, endpoint, interval)
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "unix://" + endpoint
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxInfo)))
	if err != nil {
		return fmt.Errorf("%w: CRI endpoint %q: %w", ErrConfig, endpoint, err)
	}
	defer conn.Close()
	client := rt.NewRuntimeServiceClient(conn)
	return a.withWorkers(func() error { return a.withResweep(ctx, func() error { return a.pollCRI(ctx, client, interval) }) })
}

// pollCRI lists the pods every interval and sweeps those that changed.
func (a *Agent) pollCRI(ctx context.Context, client rt.RuntimeServiceClient, interval time.Duration) error {
	for {
		jobs, pods, err := a.listCRI(ctx, client)
		if err != nil {
			a.connection(false, err)
		} else {
			a.connection(true, nil)
			// Each sweep replaces the last one's remainder; a pod
			// unchanged since its last complete scan is skipped.
			a.sweepChanged(ctx, jobs, pods)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// listCRI lists the ready sandboxes and reads each one's netns path.
func (a *Agent) listCRI(ctx context.Context, c rt.RuntimeServiceClient) ([]job, int, error) {
	lctx, cancel := context.WithTimeout(ctx, criTimeout)
	defer cancel()
	l, err := c.ListPodSandbox(lctx, &rt.ListPodSandboxRequest{Filter: &rt.PodSandboxFilter{
		State: &rt.PodSandboxStateValue{State: rt.PodSandboxState_SANDBOX_READY}}})
	if err != nil {
		return nil, 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	var jobs []job
	for _, p := range l.Items {
		path, err := criNetns(lctx, c, p.Id)
		if err != nil || path == "" {
			// Gone since the list, or host network.
			continue
		}
		md := p.GetMetadata()
		jobs = append(jobs, job{meta: scan.Meta{Node: a.cfg.Node, Source: SourceSweep, Stage: StageCRI, SandboxID: p.Id,
			Pod: findings.Pod{Namespace: md.GetNamespace(), Name: md.GetName(), UID: md.GetUid()}, Netns: path,
			Owner: ownerOf(p.GetLabels(), md.GetName())}})
	}
	return jobs, len(l.Items), nil
}

// criNetns reads the sandbox's network namespace path from its verbose
// status: containerd and CRI-O both put the sandbox's runtime spec there.
// Empty for a sandbox without one (host network).
func criNetns(ctx context.Context, c rt.RuntimeServiceClient, id string) (string, error) {
	st, err := c.PodSandboxStatus(ctx, &rt.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return "", fmt.Errorf("pod sandbox status %q: %w", id, err)
	}
	if st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork() == rt.NamespaceMode_NODE {
		return "", nil
	}
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil {
		return "", fmt.Errorf("pod sandbox status %q: decode info: %w", id, err)
	}
	for _, ns := range info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			return ns.Path, nil
		}
	}
	return "", nil
}
