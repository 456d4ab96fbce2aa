package kubetest

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestWaitHTTPLostPort: a server whose port another process took between
// freePort and its bind exits on the bind error; waiting for it reports
// the lost port (New then tries new ports) instead of taking the other
// server's answers for its own or waiting out the limit.
func TestWaitHTTPLostPort(t *testing.T) {
	Need(t)
	// Another test's server on the port, answering 200 to anything.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	go srv.Serve(l)
	defer srv.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	dir := t.TempDir()
	c := &Cluster{t: t, Dir: dir}
	logPath := filepath.Join(dir, "etcd.log")
	url := "http://127.0.0.1:" + port
	peer := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	// etcd slow to start, as on a loaded machine: the other server's
	// answers come while it lives and holds no port yet. The shell execs
	// it, so the pid stays the server's.
	slow := filepath.Join(dir, "slow-etcd")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nsleep 0.5\nexec "+Etcd+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	etcd := c.spawn(slow, logPath, "--name=lost", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=lost="+peer)
	defer stop(etcd)
	// Waiting out the limit would fail the test: lost must come first.
	if lost := c.waitHTTP(url+"/health", nil, "", 60*time.Second, logPath, etcd, true); !lost {
		t.Fatalf("waitHTTP took the other server's answer for etcd's\nlog tail:\n%s", tail(logPath, 2000))
	}
}

// TestListens: a port this process listens on is its; another is not.
func TestListens(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mine := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	if !listens(os.Getpid(), mine) {
		t.Errorf("listens(self, %s) = false for its own listener", mine)
	}
	other := strconv.Itoa(freePort(t))
	if listens(os.Getpid(), other) {
		t.Errorf("listens(self, %s) = true for a port nobody holds", other)
	}
}
