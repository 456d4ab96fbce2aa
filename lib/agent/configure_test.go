package agent

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/net/multiplex"
	"github.com/containerd/ttrpc"
)

// registrar is a runtime that answers RegisterPlugin and never sends
// Configure: it calls registered after each registration.
type registrar struct{ registered func() }

func (r registrar) RegisterPlugin(context.Context, *api.RegisterPluginRequest) (*api.Empty, error) {
	r.registered()
	return &api.Empty{}, nil
}

func (registrar) UpdateContainers(context.Context, *api.UpdateContainersRequest) (*api.UpdateContainersResponse, error) {
	return &api.UpdateContainersResponse{}, nil
}

// silentRuntime listens on sock as a runtime that registers plugins and
// then, with drop, closes their connection (a runtime restarting between
// RegisterPlugin and Configure) or, without, keeps it open and silent (a
// runtime hung there). It counts the connections it accepted and closes
// everything at the test's end.
func silentRuntime(t *testing.T, sock string, drop bool) (accepted func() int) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		n     int
		muxes []multiplex.Mux
	)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			m := multiplex.Multiplex(c)
			mu.Lock()
			n++
			muxes = append(muxes, m)
			mu.Unlock()
			rl, err := m.Listen(multiplex.RuntimeServiceConn)
			if err != nil {
				t.Error(err)
				return
			}
			srv, err := ttrpc.NewServer()
			if err != nil {
				t.Error(err)
				return
			}
			api.RegisterRuntimeService(srv, registrar{registered: func() {
				if drop {
					// After the answer is on its way.
					time.AfterFunc(50*time.Millisecond, func() { _ = m.Close() })
				}
			}})
			go func() { _ = srv.Serve(context.Background(), rl) }()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, m := range muxes {
			_ = m.Close()
		}
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestConnectWithoutConfigure: nri's stub.Start (v0.11.0) waits for the
// runtime's Configure with no timeout, holding the lock its Stop and its
// close handler take. A runtime that closed the connection between
// RegisterPlugin and Configure, or hung there, left connectOnce waiting
// for good: the agent never dialed again, and never stopped. It now
// returns after configureWait, or at once when ctx ends, and the next
// dial goes out.
func TestConnectWithoutConfigure(t *testing.T) {
	nrilog.Set(nopLogger{})
	connect := func(t *testing.T, drop bool, wait time.Duration, cancelAfterDial bool) {
		t.Helper()
		dir := t.TempDir()
		sock := filepath.Join(dir, "nri.sock")
		accepted := silentRuntime(t, sock, drop)
		a, err := New(testConfig(dir, nopObserver{}))
		if err != nil {
			t.Fatal(err)
		}
		a.cfg.Socket, a.configureWait = sock, wait
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for i := 1; i <= 2; i++ {
			ran := make(chan error, 1)
			go func() { ran <- a.connectOnce(ctx) }()
			if cancelAfterDial {
				for deadline := time.Now().Add(10 * time.Second); accepted() < i; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("dial %d: no connection within 10 s", i)
					}
				}
				time.Sleep(200 * time.Millisecond)
				cancel()
			}
			bound := 10 * time.Second
			if !cancelAfterDial {
				bound += wait
			}
			select {
			case err := <-ran:
				if !cancelAfterDial && !errors.Is(err, errNotConfigured) {
					t.Errorf("dial %d: connectOnce = %v, want %v", i, err, errNotConfigured)
				}
			case <-time.After(bound):
				t.Fatalf("dial %d: connectOnce still waiting for Configure after %s (configureWait %s, cancelled %v)", i, bound, wait, cancelAfterDial)
			}
			if cancelAfterDial {
				return
			}
		}
		if n := accepted(); n != 2 {
			t.Errorf("%d connections, want 2", n)
		}
	}
	t.Run("closed", func(t *testing.T) { connect(t, true, 300*time.Millisecond, false) })
	t.Run("hung", func(t *testing.T) { connect(t, false, 300*time.Millisecond, false) })
	t.Run("stopped", func(t *testing.T) { connect(t, false, time.Hour, true) })
}
