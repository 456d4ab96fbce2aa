//go:build !hookonly && !agentonly

package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/agent"
	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
)

// TestBuildInfoMetric: the agent's and the forwarder's /metrics carry
// iptables_alerter_build_info with what version prints.
func TestBuildInfoMetric(t *testing.T) {
	a := about()
	want := `iptables_alerter_build_info{build="full",commit="` + a.Commit + `",go_version="` + a.GoVersion + `",version="` + a.Version + `"} 1` + "\n"
	log := logrus.New()
	ag, err := agent.New(agent.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]func() string{
		"agent": func() string {
			rec := httptest.NewRecorder()
			metricsHandler(agentRegistry(ag)).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			return rec.Body.String()
		},
		"forward": func() string {
			rec := httptest.NewRecorder()
			refusals := kubeapi.NewRefusals()
			reg := forwardMetrics(&consumer.Runner{}, events.NewConsumer(nil, log, refusals), nil, refusals)
			metricsHandler(reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			return rec.Body.String()
		},
	} {
		if b := body(); !strings.Contains(b, want) {
			t.Errorf("%s /metrics lacks %q:\n%s", name, want, b)
		}
	}
}
