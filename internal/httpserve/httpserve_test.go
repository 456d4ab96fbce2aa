package httpserve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// get sends one keep-alive request on c and reads the reply's status line
// and body.
func get(t *testing.T, c net.Conn, r *bufio.Reader) string {
	t.Helper()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + string(b)
}

// TestConnectionsBounded: past MaxConns a connection is not served until
// one closes, and an idle keep-alive connection is closed by the server,
// so idle connections cannot pile up (5,000 of them took the agent past
// its memory limit).
func TestConnectionsBounded(t *testing.T) {
	const maxConns = 4
	const idle = 2 * time.Second
	srv, err := Start(Options{Addr: "127.0.0.1:0", Alive: func() time.Time { return time.Time{} }, MaxConns: maxConns, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	var held []net.Conn
	var readers []*bufio.Reader
	for i := 0; i < maxConns; i++ {
		c, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		r := bufio.NewReader(c)
		if got := get(t, c, r); !strings.HasPrefix(got, "200 OK ok") {
			t.Fatalf("conn %d: %q", i, got)
		}
		held, readers = append(held, c), append(readers, r)
	}
	// One more: the kernel completes the handshake (backlog), the server
	// does not take it while the others are open.
	extra, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { extra.Close() })
	if _, err := io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = extra.SetReadDeadline(time.Now().Add(idle / 4))
	if n, err := extra.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Fatalf("connection %d was served while %d were open", maxConns+1, maxConns)
	}
	// The idle ones are closed by the server, not by the client.
	for i, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(30 * idle))
		if _, err := readers[i].ReadByte(); err != io.EOF {
			t.Fatalf("idle conn %d: read gave %v, want EOF (closed by the server)", i, err)
		}
	}
	// And the waiting one is served then.
	_ = extra.SetReadDeadline(time.Now().Add(30 * idle))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil {
		t.Fatalf("the waiting connection was not served after the idle ones closed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestHealthz: ok, degraded with why, and 503 once the main loop stalled.
func TestHealthz(t *testing.T) {
	last := time.Now()
	why := ""
	srv, err := Start(Options{Addr: "127.0.0.1:0", Alive: func() time.Time { return last }, StallAfter: time.Minute, Degraded: func() string { return why }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	check := func(wantCode int, wantBody string) {
		t.Helper()
		resp, err := http.Get("http://" + srv.Addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantCode || !strings.HasPrefix(string(b), wantBody) {
			t.Fatalf("got %d %q, want %d %q", resp.StatusCode, b, wantCode, wantBody)
		}
	}
	check(200, "ok")
	why = "no pod netns reachable"
	check(200, "degraded: no pod netns reachable")
	last = time.Now().Add(-2 * time.Minute)
	check(503, "main loop stalled")
}

// TestProbeAddr: the probe listener answers /healthz while the main
// one's connections are all held, and takes loopback addresses only.
func TestProbeAddr(t *testing.T) {
	if _, err := Start(Options{Addr: "127.0.0.1:0", ProbeAddr: "0.0.0.0:0", Alive: time.Now}); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("probe on 0.0.0.0: %v, want refused", err)
	}
	probe := listenAddr(t)
	srv, err := Start(Options{Addr: "127.0.0.1:0", ProbeAddr: probe, Alive: func() time.Time { return time.Time{} }, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	for range 2 {
		c, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if got := get(t, c, bufio.NewReader(c)); !strings.HasPrefix(got, "200 OK ok") {
			t.Fatalf("main listener: %q", got)
		}
	}
	for i := range ProbeConns + 2 {
		c, err := net.Dial("tcp", probe)
		if err != nil {
			t.Fatal(err)
		}
		got := get(t, c, bufio.NewReader(c))
		c.Close()
		if !strings.HasPrefix(got, "200 OK ok") {
			t.Fatalf("probe %d with the main listener full: %q", i, got)
		}
	}
}

// listenAddr gives a free loopback address.
func listenAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestHandlerDeadline: what a handler waits for (a token review of up to
// 10 s, then the agent's page of up to 20 s) ends before the server's
// write timeout, 30 s after the headers, cuts the reply: the request's
// context ends with time left to answer a whole 502.
func TestHandlerDeadline(t *testing.T) {
	seen := make(chan time.Duration, 1)
	srv, err := Start(Options{Addr: "127.0.0.1:0", Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		d, ok := r.Context().Deadline()
		if !ok {
			seen <- -1
			return
		}
		seen <- time.Until(d)
	})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	resp, err := http.Get("http://" + srv.Addr + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if left := <-seen; left <= 0 || left > writeTimeout-time.Second {
		t.Errorf("the handler's context has %v left, want a deadline a few seconds inside the write timeout (%v)", left, writeTimeout)
	}
}
