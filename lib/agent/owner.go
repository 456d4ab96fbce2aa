package agent

import "strings"

// Labels the pod's controllers set, which the kubelet copies onto the pod
// sandbox with the pod's other labels: the runtime passes them to the
// agent, which has no API access to read ownerReferences.
const (
	labelJobName     = "batch.kubernetes.io/job-name"
	labelJobNameOld  = "job-name"
	labelStatefulPod = "statefulset.kubernetes.io/pod-name"
	labelTemplate    = "pod-template-hash"
	// The DaemonSet controller sets both; a StatefulSet's pods have the
	// revision hash but no template generation.
	labelRevision   = "controller-revision-hash"
	labelGeneration = "pod-template-generation"
)

// The API server makes a generateName pod's name as the base, cut to
// maxGeneratedBase characters, and genSuffix random ones (apiserver's
// names.SimpleNameGenerator): a name of maxGeneratedBase+genSuffix
// characters may hold a cut base, a shorter one holds it whole.
const (
	maxGeneratedBase = 63 - genSuffix
	genSuffix        = 5
)

// ownerOf names the workload of a pod from its labels, as "Kind/name", where
// a controller's label proves it: the Job controller's job name; a
// StatefulSet's pod-name label, the set's name being the pod's before
// "-ordinal"; a Deployment's pod-template-hash, found in the pod's name as
// "<deployment>-<hash>-<suffix>"; a DaemonSet's revision hash and template
// generation, the set's name being the pod's before "-<suffix>" where the
// name is short enough for the base to be whole (a DaemonSet on 300 nodes
// is one workload, not 300 pods each alerting as its own). Otherwise ""
// (a bare pod's, a name too long to hold the hash or a whole base): never
// a guess from the name alone. A Job's CronJob is not named: only the
// Job's name, not a label, would say it. The forwarder, with API access,
// resolves owners for Events.
func ownerOf(labels map[string]string, pod string) string {
	if j := labels[labelJobName]; j != "" {
		return "Job/" + j
	}
	if j := labels[labelJobNameOld]; j != "" {
		return "Job/" + j
	}
	if labels[labelStatefulPod] == pod {
		if i := strings.LastIndexByte(pod, '-'); i > 0 && digits(pod[i+1:]) {
			return "StatefulSet/" + pod[:i]
		}
	}
	if h := labels[labelTemplate]; h != "" {
		if i := strings.LastIndex(pod, "-"+h+"-"); i > 0 {
			return "Deployment/" + pod[:i]
		}
	}
	if labels[labelRevision] != "" && labels[labelGeneration] != "" && len(pod) < maxGeneratedBase+genSuffix {
		if i := len(pod) - genSuffix - 1; i > 0 && strings.LastIndexByte(pod, '-') == i {
			return "DaemonSet/" + pod[:i]
		}
	}
	return ""
}

// digits tells whether s is a non-empty run of ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
