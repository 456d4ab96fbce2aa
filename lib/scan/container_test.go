package scan

import (
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/ocistate"
)

// TestContainer: the hook skips host-network and non-kubelet containers
// at debug and a container without a netns at info; its record carries
// the container's fields, the stage falling back to the status, and the
// memory key falls back to the netns identity.
func TestContainer(t *testing.T) {
	pod := ocistate.Container{ID: "c1", SandboxID: "sb", PodNamespace: "ns", PodName: "p", PodUID: "u", ContainerName: "app", Image: "img", Netns: "/run/netns/x", Status: "created"}
	hostNet, bare, noNetns := pod, ocistate.Container{Netns: "/run/netns/y"}, pod
	hostNet.HostNetwork, noNetns.Netns = true, ""
	for _, tc := range []struct {
		c     ocistate.Container
		all   bool
		scan  bool
		level logrus.Level
	}{{pod, false, true, 0}, {hostNet, true, false, logrus.DebugLevel}, {bare, false, false, logrus.DebugLevel}, {bare, true, true, 0}, {noNetns, false, false, logrus.InfoLevel}} {
		if why, lvl := Skip(tc.c, tc.all); (why == "") != tc.scan || lvl != tc.level {
			t.Errorf("Skip(%+v, %t) = %q, %v", tc.c, tc.all, why, lvl)
		}
	}
	m := ContainerMeta(pod, "node1", "")
	if m.Node != "node1" || m.Source != "hook" || m.Stage != "created" || m.SandboxID != "sb" || m.Pod.UID != "u" || m.Container != "app" || m.Image != "img" || m.Netns != pod.Netns {
		t.Errorf("ContainerMeta: %+v", m)
	}
	if m := ContainerMeta(pod, "node1", "poststart"); m.Stage != "poststart" {
		t.Errorf("stage: %q", m.Stage)
	}
	if k := SandboxKey(pod, Result{NetnsID: "42"}); k != "sb" {
		t.Errorf("key %q", k)
	}
	if k := SandboxKey(bare, Result{NetnsID: "42"}); k != "netns:42" {
		t.Errorf("key without a sandbox %q", k)
	}
}
