//go:build !hookonly

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// healthCommand is the kubelet's exec probe: the image is FROM scratch, so
// the probe is this binary, asking a daemon's --probe-addr on loopback,
// which no client of its --health-addr can fill.
var healthCommand = command{use: "health", summary: "ask a daemon's /healthz on loopback (the kubelet's exec probe)",
	long: healthLong, newConfig: func() config { return new(healthConfig) }}

const healthLong = `GETs http://ADDR/healthz, ADDR being a daemon's --probe-addr (agent,
forward, textfile): a loopback listener of its own, which the connections
a client holds on --health-addr cannot fill. The DaemonSets' liveness and
readiness probes run it as an exec probe, since the kubelet's HTTP probes
reach the pod's IP, not its loopback.

Prints the answer ("ok", or "degraded: why") on stdout.
Exit status: 0 when the daemon answers 200 (ok or degraded), 1 when it
answers anything else or not within --timeout (the reason on stderr), 2 on
bad flags.`

// healthBodyMax bounds what is read of an answer: "ok" or a line of why.
const healthBodyMax = 4 << 10

type healthConfig struct {
	addr    string
	timeout time.Duration
}

func (c *healthConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "", "the daemon's --probe-addr, e.g. 127.0.0.1:9759 (required)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "give up after this long (keep it under the probe's timeoutSeconds)")
}

func (c *healthConfig) run(_ []string, s stdio) int {
	if _, _, err := net.SplitHostPort(c.addr); err != nil {
		fmt.Fprintf(s.err, "health: --addr %q: want HOST:PORT, e.g. 127.0.0.1:9759 (see '%s health --help')\n", c.addr, prog)
		return 2
	}
	if c.timeout <= 0 {
		fmt.Fprintf(s.err, "health: --timeout %s: want a positive duration\n", c.timeout)
		return 2
	}
	// No proxy: the environment's would send a loopback request away.
	client := &http.Client{Timeout: c.timeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Get("http://" + c.addr + "/healthz")
	if err != nil {
		fmt.Fprintf(s.err, "health: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, healthBodyMax))
	if err != nil {
		fmt.Fprintf(s.err, "health: read the answer of %s: %v\n", c.addr, err)
		return 1
	}
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(s.err, "health: %s answered %s: %s\n", c.addr, resp.Status, text)
		return 1
	}
	fmt.Fprintln(s.out, text)
	return 0
}
