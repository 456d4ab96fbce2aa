package textfile

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// vendorsOf turns stored label values back into vendors for
// findings.VendorLabels; "unknown" means none.
func vendorsOf(labels []string) []findings.Vendor {
	var vs []findings.Vendor
	for _, l := range labels {
		if l != findings.VendorUnknown {
			vs = append(vs, findings.Vendor{Name: l})
		}
	}
	return vs
}

var (
	podRulesDesc = prometheus.NewDesc("iptables_alerter_pod_iptables_rules",
		"Rules the latest finding saw in the pod's network namespace that were made through iptables, by backend (nft: iptables-nft, legacy: kernel x_tables), for pods still on this node; a later look that could not see everything and saw milder rules leaves them.",
		[]string{"pod_namespace", "pod_name", "backend"}, nil)
	podImpactDesc = prometheus.NewDesc("iptables_alerter_pod_rules_by_impact",
		"Rules the latest finding saw in the pod's network namespace, by RHEL 10 impact (legacy: breaks; xt: breaks unless kernel-modules-extra is installed; native: keeps loading), for pods still on this node; a later look that could not see everything and saw milder rules leaves them.",
		[]string{"pod_namespace", "pod_name", "impact"}, nil)
	impactVendorDesc = prometheus.NewDesc("iptables_alerter_flagged_pods_by_impact",
		"Flagged pods on this node by the worst RHEL 10 impact of their latest finding and by recognised vendor (unknown: none; other: an admin-added vendor); a pod naming two vendors counts under both, a pod whose impact is not classified is left out.",
		[]string{"impact", "vendor"}, nil)
	unknownDesc = prometheus.NewDesc("iptables_alerter_pod_usage_unknown",
		"1 for a pod still on this node whose latest finding has state unknown: the inspection could not finish and saw no iptables usage, so whether the pod uses iptables is not known (it has no rule series).",
		[]string{"pod_namespace", "pod_name"}, nil)
	incompleteDesc = prometheus.NewDesc("iptables_alerter_pod_usage_incomplete",
		"1 for a pod still on this node whose latest look at the rules stopped early (truncated) or could not finish: its rule series are a lower bound, or an earlier look's when that saw worse, and rules that break on RHEL 10 may be among those not seen.",
		[]string{"pod_namespace", "pod_name"}, nil)
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
	for _, d := range []*prometheus.Desc{podRulesDesc, podImpactDesc, impactVendorDesc, unknownDesc, incompleteDesc, flaggedDesc, findingsDesc, malformedDesc, lastDesc} {
		ch <- d
	}
}

func (s snapshot) Collect(ch chan<- prometheus.Metric) {
	flagged := 0
	type iv struct{ impact, vendor string }
	byImpact := map[iv]int{}
	for _, p := range s.pods {
		// Unknown is not zero rules: no rule series, the pod's own gauge.
		if p.State == findings.StateUnknown {
			ch <- prometheus.MustNewConstMetric(unknownDesc, prometheus.GaugeValue, 1, p.Namespace, p.Name)
			continue
		}
		// A pod can hide its legacy rules behind a native one (a rule over
		// 32 KiB, the x_tables lock kept busy): zero legacy rules from a
		// cut look is no answer.
		if p.Truncated {
			ch <- prometheus.MustNewConstMetric(incompleteDesc, prometheus.GaugeValue, 1, p.Namespace, p.Name)
		}
		ch <- prometheus.MustNewConstMetric(podRulesDesc, prometheus.GaugeValue, float64(p.NftRules), p.Namespace, p.Name, "nft")
		ch <- prometheus.MustNewConstMetric(podRulesDesc, prometheus.GaugeValue, float64(p.LegacyRules), p.Namespace, p.Name, "legacy")
		for _, l := range findings.ImpactLevels {
			ch <- prometheus.MustNewConstMetric(podImpactDesc, prometheus.GaugeValue, float64(p.Impact.Count(l)), p.Namespace, p.Name, l)
		}
		if !p.Flagged {
			continue
		}
		flagged++
		if findings.ImpactRank(p.Worst) == len(findings.ImpactLevels) {
			continue
		}
		// Re-bounded here: the state file is read back from disk.
		for _, v := range findings.VendorLabels(vendorsOf(p.Vendors)) {
			byImpact[iv{p.Worst, v}]++
		}
	}
	for k, n := range byImpact {
		ch <- prometheus.MustNewConstMetric(impactVendorDesc, prometheus.GaugeValue, float64(n), k.impact, k.vendor)
	}
	ch <- prometheus.MustNewConstMetric(flaggedDesc, prometheus.GaugeValue, float64(flagged))
	ch <- prometheus.MustNewConstMetric(findingsDesc, prometheus.CounterValue, float64(s.state.Findings))
	ch <- prometheus.MustNewConstMetric(malformedDesc, prometheus.CounterValue, float64(s.state.Malformed))
	// No finding yet: leave the gauge out rather than claim 1970.
	if !s.state.LastFinding.IsZero() {
		ch <- prometheus.MustNewConstMetric(lastDesc, prometheus.GaugeValue, float64(s.state.LastFinding.UnixMilli())/1000)
	}
}
