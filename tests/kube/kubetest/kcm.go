package kubetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// ControllerManagerPath is the kube-controller-manager build-kube.sh
// leaves beside the kube-apiserver.
func ControllerManagerPath() string {
	return filepath.Join(filepath.Dir(APIServerPath()), "kube-controller-manager")
}

// ControllerManager runs kube-controller-manager with only the named
// controllers (e.g. "garbagecollector") against the cluster until the test
// ends, stopped before the API server, and returns its log's path. It
// skips (fails under CI=true) without the binary.
func (c *Cluster) ControllerManager(t testing.TB, controllers ...string) (logPath string) {
	t.Helper()
	kcm := ControllerManagerPath()
	_, err := os.Stat(kcm)
	nstest.Need(t, err == nil, "needs "+kcm+" (tests/kube/build-kube.sh kube-controller-manager)")
	kc := c.Kubeconfig("kcm", c.AdminToken)
	logPath = filepath.Join(c.Dir, "kube-controller-manager.log")
	cmd := c.spawn(kcm, logPath, "--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--controllers="+strings.Join(controllers, ","), "--root-ca-file="+c.CAFile, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0")
	// Cleanups run last first: this one before the cluster's stopAll.
	t.Cleanup(func() { stop(cmd) })
	return logPath
}
