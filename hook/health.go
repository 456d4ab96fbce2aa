//go:build !hookonly

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/follow"
)

// serveHealth answers /healthz with 200 while the follow loop went round
// within limit, 503 after. Each consumer sets limit from its longest
// legitimate wait (backoff, API timeouts), so an outage alone is not "stuck".
// A non-nil metrics handler is served at /metrics.
func serveHealth(addr string, f *follow.Follower, limit time.Duration, metrics http.Handler) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on health address %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if last := f.Alive(); !last.IsZero() && time.Since(last) > limit {
			http.Error(w, "follow loop stalled since "+last.UTC().Format(time.RFC3339), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
