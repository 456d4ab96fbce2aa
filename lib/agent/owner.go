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
)

// ownerOf names the workload of a pod from its labels, as "Kind/name", where
// a controller's label proves it: the Job controller's job name; a
// StatefulSet's pod-name label, the set's name being the pod's before
// "-ordinal"; a Deployment's pod-template-hash, found in the pod's name as
// "<deployment>-<hash>-<suffix>". Otherwise "" (a DaemonSet's, a bare
// pod's, a name too long to hold the hash): never a guess from the name
// alone. The forwarder, with API access, resolves owners for Events.
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
