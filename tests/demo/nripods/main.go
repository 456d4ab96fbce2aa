// Command nripods is the demo's container runtime, as far as the agent sees
// one: the runtime side of NRI (nri/pkg/adaptation, the library containerd
// and CRI-O serve NRI with) on a socket, listing the pods and containers
// given on the command line when the agent registers, then idle until
// SIGTERM or SIGINT. The pods are network namespaces the demo made; a
// container's processes are told by their cgroup, a directory the demo
// names with the container's id, as containerd's cgroupfs driver does.
//
// Usage: nripods -dir DIR NAMESPACE/POD/CONTAINER/ID=NETNS-PATH...
// It prints "ready SOCKET" once the socket listens.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nritest"
)

func main() {
	dir := flag.String("dir", "", "directory for the NRI socket (DIR/nri.sock) and the runtime's plugin directories")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s -dir DIR NAMESPACE/POD/CONTAINER/ID=NETNS-PATH...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if *dir == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i, a := range flag.Args() {
		spec, netns, ok := strings.Cut(a, "=")
		f := strings.Split(spec, "/")
		if !ok || len(f) != 4 || netns == "" {
			fmt.Fprintf(os.Stderr, "nripods: %q is not NAMESPACE/POD/CONTAINER/ID=NETNS-PATH\n", a)
			os.Exit(2)
		}
		p := &api.PodSandbox{Id: fmt.Sprintf("sandbox-%d-%s", i, f[1]), Name: f[1], Namespace: f[0], Uid: fmt.Sprintf("uid-%d", i),
			Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: netns}}}}
		pods = append(pods, p)
		ctrs = append(ctrs, &api.Container{Id: f[3], PodSandboxId: p.Id, Name: f[2], State: api.ContainerState_CONTAINER_RUNNING})
	}
	nrilog.Set(nritest.Quiet{})
	ad, sock, err := nritest.Start(*dir, func(ctx context.Context, cb nri.SyncCB) error {
		_, err := cb(ctx, pods, ctrs)
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nripods:", err)
		os.Exit(1)
	}
	fmt.Println("ready", sock)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ad.Stop()
}
