//go:build !hookonly

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// serveHealth answers /healthz with 200 while the main loop went round
// within limit (alive gives when it last did: a follower's Alive, the
// agent's last connection attempt), 503 after. Each command sets limit
// from its longest legitimate wait (backoff, API timeouts), so an outage
// alone is not "stuck". A non-nil degraded gives why the command works but
// cannot see what it should (the agent: no pod netns reachable); /healthz
// then still answers 200, since a restart would not mend a missing mount
// and the probes would only hide the log saying so, with "degraded: why"
// as its body (the command's metrics and log say it too). A non-nil
// metrics handler is served at /metrics.
func serveHealth(addr string, alive func() time.Time, limit time.Duration, degraded func() string, metrics http.Handler) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on health address %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if last := alive(); !last.IsZero() && time.Since(last) > limit {
			http.Error(w, "main loop stalled since "+last.UTC().Format(time.RFC3339), http.StatusServiceUnavailable)
			return
		}
		if degraded != nil {
			if why := degraded(); why != "" {
				_, _ = io.WriteString(w, "degraded: "+why+"\n")
				return
			}
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

// metricsHandler serves reg in the Prometheus text format. By hand:
// promhttp would link a compression library for a page of a few lines.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mfs, err := reg.Gather()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
				return
			}
		}
	})
}
