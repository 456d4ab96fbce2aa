// Package httpserve serves the daemons' /healthz and /metrics on a
// listener a stranger can reach (the NetworkPolicy narrows who, this
// package bounds what a connection may cost).
//
// Every connection is bounded in time (headers, the whole request, the
// reply, an idle keep-alive) and in number: past MaxConns the listener
// stops accepting, so further connections wait in the kernel's backlog
// instead of costing the daemon a goroutine and buffers each. Without the
// bounds, 5,000 idle keep-alive connections took the agent from 31 MB to
// 130 MB, past its memory limit.
package httpserve

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
)

// Bounds of one connection. A scrape reads a page of a few kilobytes:
// these are generous for Prometheus and short for a connection held open
// to cost memory.
const (
	DefaultMaxConns   = 32
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 30 * time.Second
	maxHeaderBytes    = 16 << 10
	// handlerTimeout ends a request's context this long after its
	// handler began, before the write timeout cuts the reply: what the
	// handler waits for (a token review, then the agent's page) is cut
	// short with time left to answer a whole 502, not a cut reply.
	handlerTimeout = writeTimeout - 5*time.Second
)

// Options says what to serve.
type Options struct {
	Addr string
	// Alive gives when the main loop last went round; /healthz answers
	// 503 once that is longer ago than StallAfter. Nil: no /healthz.
	Alive      func() time.Time
	StallAfter time.Duration
	// Degraded, when set and non-empty, is why the daemon works but cannot
	// see what it should: /healthz still answers 200 (a restart would not
	// mend a missing mount) with "degraded: why" as its body.
	Degraded func() string
	// Metrics, when set, is served at /metrics.
	Metrics http.Handler
	// Handler, when set, serves every path the above do not.
	Handler http.Handler
	// TLS, when set, is the server's TLS configuration: HTTPS only, and
	// HTTP/1.1 only (see Start).
	TLS *tls.Config
	// MaxConns caps the connections served at once (0: DefaultMaxConns).
	MaxConns int
	// IdleTimeout overrides the keep-alive bound (tests).
	IdleTimeout time.Duration
	// ProbeAddr, when set, is a loopback address (127.0.0.1:PORT) where
	// the same pages are served on a listener of its own, ProbeConns
	// connections at most: the kubelet's exec probe (`iptables-alerter
	// health`) gets an answer however many connections others hold on
	// Addr, since in a pod's own netns only the pod reaches loopback.
	// With an empty Addr only ProbeAddr is served.
	ProbeAddr string
}

// ProbeConns caps the probe listener's connections: a liveness and a
// readiness probe at once, with room for a slow one.
const ProbeConns = 4

// Start listens on o.Addr and serves in the background until the returned
// server is closed; its Addr is the address listened on (a port 0 in
// o.Addr is chosen then).
func Start(o Options) (*http.Server, error) {
	var probe net.Listener
	if o.ProbeAddr != "" {
		host, _, err := net.SplitHostPort(o.ProbeAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("probe address %q: want a loopback IP and port, e.g. 127.0.0.1:9759 (reachable from the pod alone)", o.ProbeAddr)
		}
		if probe, err = net.Listen("tcp", o.ProbeAddr); err != nil {
			return nil, fmt.Errorf("listen on %q: %w", o.ProbeAddr, err)
		}
	}
	if o.Addr == "" && probe != nil {
		srv := newServer(o, probe.Addr().String())
		go func() { _ = srv.Serve(netutil.LimitListener(probe, ProbeConns)) }()
		return srv, nil
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		if probe != nil {
			probe.Close()
		}
		return nil, fmt.Errorf("listen on %q: %w", o.Addr, err)
	}
	srv := newServer(o, ln.Addr().String())
	if probe != nil {
		// Plain HTTP even when Addr is TLS: loopback only.
		go func() { _ = srv.Serve(netutil.LimitListener(probe, ProbeConns)) }()
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	// LimitListener's Accept waits for a connection to close before it
	// takes the next from the backlog.
	limited := netutil.LimitListener(ln, o.MaxConns)
	if o.TLS == nil {
		go func() { _ = srv.Serve(limited) }()
		return srv, nil
	}
	// HTTP/1.1 only: HTTP/2 multiplexes streams on one connection, which
	// the connection cap does not bound (and its rapid-reset attack costs
	// the server work per stream); a scrape needs one request at a time.
	// The TLS handshake is bounded by the read and write timeouts above.
	cfg := o.TLS.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	srv.TLSConfig = cfg
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	go func() { _ = srv.Serve(tls.NewListener(limited, cfg)) }()
	return srv, nil
}

// newServer gives the server of o's pages, every connection bounded;
// addr is what it says it listens on.
func newServer(o Options, addr string) *http.Server {
	idle := idleTimeout
	if o.IdleTimeout > 0 {
		idle = o.IdleTimeout
	}
	mux := http.NewServeMux()
	if o.Alive != nil {
		mux.HandleFunc("/healthz", health(o))
	}
	if o.Metrics != nil {
		mux.Handle("/metrics", o.Metrics)
	}
	if o.Handler != nil {
		mux.Handle("/", o.Handler)
	}
	return &http.Server{
		Addr:              addr,
		Handler:           withDeadline(mux),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// withDeadline gives each request's context handlerTimeout.
func withDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), handlerTimeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// health answers /healthz from o.Alive and o.Degraded.
func health(o Options) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if last := o.Alive(); !last.IsZero() && time.Since(last) > o.StallAfter {
			http.Error(w, "main loop stalled since "+last.UTC().Format(time.RFC3339), http.StatusServiceUnavailable)
			return
		}
		if o.Degraded != nil {
			if why := o.Degraded(); why != "" {
				_, _ = io.WriteString(w, "degraded: "+why+"\n")
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	}
}

// Metrics serves reg's metrics with promhttp: the format the scraper asks
// for (the Prometheus text format, or OpenMetrics), gzip when it accepts
// it, and a 500 when gathering fails. Its own
// promhttp_metric_handler_errors_total counter is registered in reg, so a
// page that failed shows on the next one that does not.
func Metrics(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.HTTPErrorOnError,
		Registry:          reg,
		EnableOpenMetrics: true,
	})
}
