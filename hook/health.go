//go:build !hookonly

package main

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iptables-alerter/iptables-alerter/internal/httpserve"
)

// serveHealth serves /healthz (and metrics at /metrics when non-nil) on
// addr. Each command sets limit from its longest legitimate wait (backoff,
// API timeouts), so an outage alone is not "stuck"; degraded, when set,
// says why the command works but cannot see what it should.
func serveHealth(addr string, alive func() time.Time, limit time.Duration, degraded func() string, metrics http.Handler) (*http.Server, error) {
	return httpserve.Start(httpserve.Options{Addr: addr, Alive: alive, StallAfter: limit, Degraded: degraded, Metrics: metrics})
}

func metricsHandler(reg *prometheus.Registry) http.Handler { return httpserve.Metrics(reg) }
