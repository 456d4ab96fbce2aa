package findings

// A node's (or a workload's) RHEL 10 readiness, from the impact levels of
// its findings: the values of the forwarder's node label and of `report
// --by node|pool`, worst first.
const (
	// ReadinessBreaks: legacy x_tables rules; RHEL 10 has no ip_tables.
	ReadinessBreaks = "breaks"
	// ReadinessUnknown: a check that could not finish, or usage not
	// classified: never ready when not everything was seen.
	ReadinessUnknown = "unknown"
	// ReadinessNeedsExtra: xt rules; they load only with
	// kernel-modules-extra.
	ReadinessNeedsExtra = "needs-extra"
	// ReadinessReady: native rules only, or none.
	ReadinessReady = "ready"
)

// Readinesses lists the values, worst first.
var Readinesses = []string{ReadinessBreaks, ReadinessUnknown, ReadinessNeedsExtra, ReadinessReady}

// Readiness is the readiness of one impact level ("" and any other value:
// not classified, unknown).
func Readiness(level string) string {
	switch level {
	case ImpactLegacy:
		return ReadinessBreaks
	case ImpactXt:
		return ReadinessNeedsExtra
	case ImpactNative:
		return ReadinessReady
	}
	return ReadinessUnknown
}

// WorseReadiness is the worse of two readiness values; a value that is
// none of Readinesses counts as unknown.
func WorseReadiness(a, b string) string {
	if readinessRank(a) <= readinessRank(b) {
		return norm(a)
	}
	return norm(b)
}

func norm(r string) string { return Readinesses[readinessRank(r)] }

func readinessRank(r string) int {
	for i, v := range Readinesses {
		if v == r {
			return i
		}
	}
	return 1
}
