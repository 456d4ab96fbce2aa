// Package nritest runs the runtime side of NRI (containerd/nri's
// pkg/adaptation, which CRI-O and containerd embed) in the test's own
// process, for an agent to connect to: the tests then play the runtime's
// events (Synchronize, PostStartContainer, StopPodSandbox...) by hand.
package nritest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	nri "github.com/containerd/nri/pkg/adaptation"
)

// Start starts a runtime whose socket (returned), plugin and plugin
// configuration directories are in dir, answering a plugin's registration
// with sync. The caller stops it (Adaptation.Stop).
func Start(dir string, sync nri.SyncFn) (*nri.Adaptation, string, error) {
	for _, d := range []string{"plugins", "conf"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, "", fmt.Errorf("nri runtime: %w", err)
		}
	}
	sock := filepath.Join(dir, "nri.sock")
	ad, err := nri.New("test-runtime", "v0", sync,
		func(context.Context, []*nri.ContainerUpdate) ([]*nri.ContainerUpdate, error) { return nil, nil },
		nri.WithSocketPath(sock), nri.WithPluginPath(filepath.Join(dir, "plugins")), nri.WithPluginConfigPath(filepath.Join(dir, "conf")))
	if err != nil {
		return nil, "", fmt.Errorf("nri runtime: %w", err)
	}
	if err := ad.Start(); err != nil {
		return nil, "", fmt.Errorf("start nri runtime: %w", err)
	}
	return ad, sock, nil
}

// Quiet drops the NRI library's logs (nrilog.Set(nritest.Quiet{})): the
// bench and the demo print what they measure or show.
type Quiet struct{}

func (Quiet) Debugf(context.Context, string, ...interface{}) {}
func (Quiet) Infof(context.Context, string, ...interface{})  {}
func (Quiet) Warnf(context.Context, string, ...interface{})  {}
func (Quiet) Errorf(context.Context, string, ...interface{}) {}
