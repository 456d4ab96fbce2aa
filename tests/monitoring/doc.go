// Package monitoringtest tests packaging/monitoring: the PrometheusRule's
// rules with promtool's unit tests, the Grafana dashboard's structure and
// each of its queries (and its OpenShift console copy's), and, end to end,
// a real Prometheus server (Debian's prometheus package) scraping a real
// agent, driven by the runtime side of NRI in this process, firing the
// breaking-usage alert for a pod whose network namespace holds xt rules
// and clearing it when the pod stops.
// TestPrometheusOperator does the same through the Prometheus Operator: the
// configuration it generates from our installed objects, run by the
// upstream Prometheus the operator is built against
// (build-prometheus-operator.sh; Debian's has no Kubernetes discovery).
package monitoringtest
