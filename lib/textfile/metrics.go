package textfile

import "github.com/prometheus/client_golang/prometheus"

var (
	podRulesDesc = prometheus.NewDesc("iptables_alerter_pod_iptables_rules",
		"Rules the latest finding saw in the pod's network namespace that were made through iptables, by backend (nft: iptables-nft, legacy: kernel x_tables), for pods still on this node.",
		[]string{"pod_namespace", "pod_name", "backend"}, nil)
	flaggedDesc = prometheus.NewDesc("iptables_alerter_flagged_pods",
		"Pods on this node whose latest finding shows iptables usage.", nil, nil)
	findingsDesc = prometheus.NewDesc("iptables_alerter_findings_total",
		"Findings read from the findings file.", nil, nil)
	malformedDesc = prometheus.NewDesc("iptables_alerter_malformed_lines_total",
		"Lines of the findings file that were skipped as malformed.", nil, nil)
	lastDesc = prometheus.NewDesc("iptables_alerter_last_finding_timestamp_seconds",
		"Time of the newest finding read, in seconds since the epoch.", nil, nil)
)

// snapshot is a prometheus.Collector over a copy of the state, built for
// one write: const metrics keep the persisted counter values as they are.
type snapshot struct {
	pods  []Pod
	state State
}

func (s snapshot) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{podRulesDesc, flaggedDesc, findingsDesc, malformedDesc, lastDesc} {
		ch <- d
	}
}

func (s snapshot) Collect(ch chan<- prometheus.Metric) {
	flagged := 0
	for _, p := range s.pods {
		ch <- prometheus.MustNewConstMetric(podRulesDesc, prometheus.GaugeValue, float64(p.NftRules), p.Namespace, p.Name, "nft")
		ch <- prometheus.MustNewConstMetric(podRulesDesc, prometheus.GaugeValue, float64(p.LegacyRules), p.Namespace, p.Name, "legacy")
		if p.Flagged {
			flagged++
		}
	}
	ch <- prometheus.MustNewConstMetric(flaggedDesc, prometheus.GaugeValue, float64(flagged))
	ch <- prometheus.MustNewConstMetric(findingsDesc, prometheus.CounterValue, float64(s.state.Findings))
	ch <- prometheus.MustNewConstMetric(malformedDesc, prometheus.CounterValue, float64(s.state.Malformed))
	// No finding yet: leave the gauge out rather than claim 1970.
	if !s.state.LastFinding.IsZero() {
		ch <- prometheus.MustNewConstMetric(lastDesc, prometheus.GaugeValue, float64(s.state.LastFinding.UnixMilli())/1000)
	}
}
