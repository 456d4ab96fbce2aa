//go:build !hookonly

package main

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"github.com/iptables-alerter/iptables-alerter/internal/httpserve"
)

// serveHealth serves /healthz (and metrics at /metrics when non-nil) on
// addr, and on probeAddr (loopback, for the kubelet's exec probe, see
// healthcmd.go) when set; either may be empty. Each command sets limit
// from its longest legitimate wait (backoff, API timeouts), so an outage
// alone is not "stuck"; degraded, when set, says why the command works but
// cannot see what it should.
func serveHealth(addr, probeAddr string, alive func() time.Time, limit time.Duration, degraded func() string, metrics http.Handler) (*http.Server, error) {
	return httpserve.Start(httpserve.Options{Addr: addr, ProbeAddr: probeAddr, Alive: alive, StallAfter: limit, Degraded: degraded, Metrics: metrics})
}

// registerProbeAddr registers --probe-addr, every daemon's loopback
// health listener; example is the port the manifests give it.
func registerProbeAddr(fs *pflag.FlagSet, p *string, example string) {
	fs.StringVar(p, "probe-addr", "", "also serve /healthz on this loopback address, e.g. "+example+", on a listener of its own that no client of --health-addr can fill: the kubelet's exec probe, 'iptables-alerter health --addr "+example+"' (empty: off)")
}

// daemonCollectors are what every daemon's /metrics serves beside its own
// series: the Go runtime's and the process's (memory, CPU, file
// descriptors: what an admin sets the pod's limits by) and the build.
func daemonCollectors() []prometheus.Collector {
	return []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(), buildInfoGauge()}
}

// buildInfoGauge is iptables_alerter_build_info, 1 with the binary's
// version in labels: go_build_info names the Go module's version, which a
// make build (-X buildinfo.version from git describe) does not set.
func buildInfoGauge() prometheus.Collector {
	a := about()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "iptables_alerter_build_info",
		Help:        "Always 1; the labels say which iptables-alerter runs (version, commit, go_version, build).",
		ConstLabels: prometheus.Labels{"version": a.Version, "commit": a.Commit, "go_version": a.GoVersion, "build": a.Build},
	})
	g.Set(1)
	return g
}

func metricsHandler(reg *prometheus.Registry) http.Handler { return httpserve.Metrics(reg) }

// serveMetrics serves only /metrics on addr.
func serveMetrics(addr string, metrics http.Handler) (*http.Server, error) {
	return httpserve.Start(httpserve.Options{Addr: addr, Metrics: metrics})
}
