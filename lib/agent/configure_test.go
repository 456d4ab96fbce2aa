package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/net/multiplex"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"
)

// registrar is a runtime's RegisterPlugin: it calls registered after
// each registration, once the answer is on its way.
type registrar struct{ registered func() }

func (r registrar) RegisterPlugin(context.Context, *api.RegisterPluginRequest) (*api.Empty, error) {
	time.AfterFunc(50*time.Millisecond, r.registered)
	return &api.Empty{}, nil
}

func (registrar) UpdateContainers(context.Context, *api.UpdateContainersRequest) (*api.UpdateContainersResponse, error) {
	return &api.UpdateContainersResponse{}, nil
}

// What a runtime does after a plugin registered.
const (
	configures = iota // sends Configure, as a runtime does
	drops             // closes the connection (restarting)
	hangs             // nothing, the connection open
)

// serveRuntime is the runtime's end of one plugin connection c, doing
// then after the registration; it returns the connection's multiplexer
// and a channel closed once the plugin answered a Configure.
func serveRuntime(t *testing.T, c net.Conn, then int) (multiplex.Mux, <-chan struct{}) {
	t.Helper()
	// Its reader drops a frame for a connection not yet listened on: the
	// plugin's registration, sent as soon as it dialed, could come before
	// the Listen below and never be answered (the registration's own 5 s
	// timeout then ended Start, not configureWait). As nri's runtime side
	// does, reading waits for both ends to be made.
	m := multiplex.Multiplex(c, multiplex.WithBlockedRead())
	defer m.Unblock()
	configured := make(chan struct{})
	rl, err := m.Listen(multiplex.RuntimeServiceConn)
	if err != nil {
		t.Error(err)
		return m, configured
	}
	pc, err := m.Open(multiplex.PluginServiceConn)
	if err != nil {
		t.Error(err)
		return m, configured
	}
	plugin := api.NewPluginClient(ttrpc.NewClient(pc))
	srv, err := ttrpc.NewServer()
	if err != nil {
		t.Error(err)
		return m, configured
	}
	api.RegisterRuntimeService(srv, registrar{registered: func() {
		switch then {
		case configures:
			if _, err := plugin.Configure(context.Background(), &api.ConfigureRequest{RuntimeName: "test",
				RegistrationTimeout: api.DefaultPluginRegistrationTimeout.Milliseconds(), RequestTimeout: api.DefaultPluginRequestTimeout.Milliseconds()}); err == nil {
				close(configured)
			}
		case drops:
			_ = m.Close()
		}
	}})
	go func() { _ = srv.Serve(context.Background(), rl) }()
	return m, configured
}

// silentRuntime listens on sock as a runtime that registers plugins and
// then drops or hangs (serveRuntime). It counts the connections it
// accepted and closes everything at the test's end.
func silentRuntime(t *testing.T, sock string, drop bool) (accepted func() int) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	then := hangs
	if drop {
		then = drops
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
			m, _ := serveRuntime(t, c, then)
			mu.Lock()
			n++
			muxes = append(muxes, m)
			mu.Unlock()
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
	// The wait is longer than a registration's round trip on a loaded
	// machine: one that ends between the registration written and its
	// reply read leaves Start to the registration's own 5 s timeout (its
	// error, not errNotConfigured: seen in CI at 300 ms).
	t.Run("closed", func(t *testing.T) { connect(t, true, 2*time.Second, false) })
	t.Run("hung", func(t *testing.T) { connect(t, false, 2*time.Second, false) })
	t.Run("stopped", func(t *testing.T) { connect(t, false, time.Hour, true) })
}

// TestHandedConnectionStops: a stub the runtime started hands it the
// connection in api.PluginSocketEnvVar, never dialing: the watchdog, which
// waited for the dialed connection's first write before anything else,
// never got it and never stopped the stub, and the agent could not stop.
// And the next connection took that descriptor's number again, closed
// with the first, maybe another file's by then. Then, stopped alone, a
// handed connection whose runtime registered the plugin and sent no
// Configure still held the agent's stop: the stub's Stop waits on the
// lock its Start holds until a Configure. It now gets the agent's own, as
// a dialed one does.
func TestHandedConnectionStops(t *testing.T) {
	nrilog.Set(nopLogger{})
	for _, tc := range []struct {
		name   string
		then   int
		wait   time.Duration
		cancel bool
	}{
		{"configured, stopped", configures, time.Hour, true},
		{"hung, stopped", hangs, time.Hour, true},
		{"hung", hangs, 2 * time.Second, false}, // as in TestConnectWithoutConfigure
	} {
		t.Run(tc.name, func(t *testing.T) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			rtFile := os.NewFile(uintptr(fds[0]), "runtime")
			rt, err := net.FileConn(rtFile)
			rtFile.Close()
			if err != nil {
				t.Fatal(err)
			}
			read := make(chan struct{})
			m, configured := serveRuntime(t, &tellRead{Conn: rt, read: read}, tc.then)
			var registered <-chan struct{} = read
			defer m.Close()
			t.Setenv(api.PluginSocketEnvVar, strconv.Itoa(fds[1]))
			dir := t.TempDir()
			a, err := New(testConfig(dir, nopObserver{}))
			if err != nil {
				t.Fatal(err)
			}
			a.configureWait = tc.wait
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- a.connectOnce(ctx) }()
			if tc.then == configures {
				registered = configured
			}
			select {
			case <-registered:
			case <-time.After(10 * time.Second):
				t.Fatal("nothing from the plugin over the handed connection within 10 s")
			}
			if tc.cancel {
				time.Sleep(200 * time.Millisecond)
				cancel()
			}
			select {
			case err := <-ran:
				if !tc.cancel && !errors.Is(err, errNotConfigured) {
					t.Errorf("connectOnce = %v, want %v", err, errNotConfigured)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("connectOnce still running 10 s after its context ended or its wait (%s) passed (a handed connection)", tc.wait)
			}
			// The descriptor is the connection's, closed with it: the
			// next connection dials the socket instead of taking whatever
			// file has that number by then.
			if v, ok := os.LookupEnv(api.PluginSocketEnvVar); ok {
				t.Errorf("%s=%s still set after the handed connection ended", api.PluginSocketEnvVar, v)
			}
		})
	}
}

// tellRead is the runtime's end of a connection that closes read at the
// first bytes the plugin sent (its registration).
type tellRead struct {
	net.Conn
	read chan struct{}
	once sync.Once
}

func (c *tellRead) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.once.Do(func() { close(c.read) })
	}
	return n, err
}

// configureCounter is a stub that counts the Configures handed to it.
type configureCounter struct {
	stub.Stub
	api.PluginService
	calls atomic.Int32
}

func (c *configureCounter) Configure(context.Context, *api.ConfigureRequest) (*api.ConfigureResponse, error) {
	c.calls.Add(1)
	return &api.ConfigureResponse{}, nil
}

// TestOneConfigure: the agent's own Configure (unconfigure) and the
// runtime's could run at once, the runtime's arriving as the wait ended:
// both wrote the stub's timeouts unsynchronized, and the agent's made
// the runtime's connection fail. The runtime's now runs under the
// connection's lock (oneConfigure), and the agent's, under it too, is
// not sent once the runtime's came.
func TestOneConfigure(t *testing.T) {
	a, err := New(testConfig(t.TempDir(), nopObserver{}))
	if err != nil {
		t.Fatal(err)
	}
	conn := &connection{Agent: a}
	st := &configureCounter{}
	inRuntime, release := make(chan struct{}), make(chan struct{})
	runtimeDone := make(chan error, 1)
	go func() {
		_, err := conn.oneConfigure(context.Background(), func(any) error { return nil },
			&ttrpc.UnaryServerInfo{FullMethod: "/nri.pkg.api.v1alpha1.Plugin/Configure"},
			func(ctx context.Context, _ func(any) error) (any, error) {
				close(inRuntime)
				<-release
				_, err := conn.Configure(ctx, "", "test", "1")
				return nil, err
			})
		runtimeDone <- err
	}()
	<-inRuntime
	own := make(chan bool, 1)
	go func() { own <- conn.unconfigure(st) }()
	select {
	case <-own:
		t.Fatal("the agent's Configure ran beside the runtime's")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-runtimeDone; err != nil {
		t.Fatal(err)
	}
	if ok := <-own; !ok || st.calls.Load() != 0 {
		t.Errorf("unconfigure = %v with %d Configures sent; want true and none after the runtime's", ok, st.calls.Load())
	}
	// Without the runtime's, the agent's goes out.
	fresh := &connection{Agent: a}
	if ok := fresh.unconfigure(st); !ok || st.calls.Load() != 1 {
		t.Errorf("unconfigure on a connection not configured = %v with %d Configures; want true, 1", ok, st.calls.Load())
	}
}
