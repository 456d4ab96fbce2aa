package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// podGoneError says the API serves no pod by the finding's name, or
// another pod under it.
type podGoneError struct{ err error }

func (e *podGoneError) Error() string { return e.err.Error() }
func (e *podGoneError) Unwrap() error { return e.err }

// invalidError says a finding names something no API object can be
// called: asking would never succeed.
type invalidError struct{ err error }

func (e *invalidError) Error() string { return e.err.Error() }

// IsPodGone reports whether err (from LivePod) says the finding's pod is
// gone: no pod by its name, or one with another UID.
func IsPodGone(err error) bool {
	var g *podGoneError
	return errors.As(err, &g)
}

// IsInvalid reports whether err (from LivePod) says the finding names no
// possible pod (an invalid namespace or name).
func IsInvalid(err error) bool {
	var i *invalidError
	return errors.As(err, &i)
}

// LivePod gets the pod as the API serves it now, if it is the pod the
// finding names: its UID is the finding's or, for a static pod, the value
// of the mirror pod's owner.MirrorAnnotation (IsMirror). Its error is
// IsPodGone, IsInvalid, Retryable (try again later) or else final (the
// API refused the get for good).
func LivePod(ctx context.Context, client kubernetes.Interface, want findings.Pod) (*corev1.Pod, error) {
	// client-go refuses such names before sending anything, with an error
	// that looks like a lost connection: it would be retried forever and
	// hold every later finding back. No pod can have them.
	for what, name := range map[string]string{"namespace": want.Namespace, "pod name": want.Name} {
		if msgs := path.IsValidPathSegmentName(name); len(msgs) > 0 {
			return nil, &invalidError{fmt.Errorf("invalid %s %q: %s", what, name, strings.Join(msgs, ", "))}
		}
	}
	pod, err := client.CoreV1().Pods(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		err = fmt.Errorf("get pod %q: %w", want.Namespace+"/"+want.Name, err)
		if apierrors.IsNotFound(err) {
			return nil, &podGoneError{err}
		}
		return nil, err
	}
	if string(pod.UID) != want.UID && pod.Annotations[owner.MirrorAnnotation] != want.UID {
		return nil, &podGoneError{fmt.Errorf("pod %q has uid %q, the finding is about uid %q", pod.Namespace+"/"+pod.Name, pod.UID, want.UID)}
	}
	return pod, nil
}

// IsMirror tells that the live pod is the mirror of the finding's static
// pod: its UID is not the finding's.
func IsMirror(pod *corev1.Pod, want findings.Pod) bool { return string(pod.UID) != want.UID }

// PodRead sorts the error of a read of the live pod (LivePod,
// NodePods.LivePod) for a finding's consumer: gone (IsPodGone), final
// (refused for good, an authorizer's 403 about its namespace alone
// included: RefusedHere), or retry, the error to try again with (an
// access review that could not be made joins it). All false and nil for
// a nil err.
func PodRead(ctx context.Context, client kubernetes.Interface, err error) (gone, final bool, retry error) {
	if err == nil {
		return false, false, nil
	}
	if IsPodGone(err) {
		return true, false, nil
	}
	here, rerr := RefusedHere(ctx, client, err)
	switch {
	case rerr != nil:
		return false, false, errors.Join(err, rerr)
	case Retryable(err) && !here:
		return false, false, err
	}
	return false, true, nil
}
