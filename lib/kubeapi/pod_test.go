package kubeapi

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// TestLivePod: each way a finding's pod can fail to be the live one comes
// back as an error its predicate names, and only an outage is retried.
func TestLivePod(t *testing.T) {
	cs := fake.NewSimpleClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "u1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-a", UID: "mirror-uid",
			Annotations: map[string]string{owner.MirrorAnnotation: "cfg-hash"}}},
	)
	ctx := context.Background()
	for _, tc := range []struct {
		name                         string
		want                         findings.Pod
		found, gone, invalid, mirror bool
	}{
		{name: "same uid", want: findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"}, found: true},
		{name: "static pod", want: findings.Pod{Namespace: "kube-system", Name: "etcd-a", UID: "cfg-hash"}, found: true, mirror: true},
		{name: "other uid", want: findings.Pod{Namespace: "shop", Name: "web-1", UID: "u0"}, gone: true},
		{name: "not found", want: findings.Pod{Namespace: "shop", Name: "web-2", UID: "u2"}, gone: true},
		{name: "invalid name", want: findings.Pod{Namespace: "shop", Name: "../x", UID: "u3"}, invalid: true},
	} {
		pod, err := LivePod(ctx, cs, tc.want)
		if (pod != nil) != tc.found || IsPodGone(err) != tc.gone || IsInvalid(err) != tc.invalid || Retryable(err) {
			t.Errorf("%s: pod %v, err %v (gone %v, invalid %v, retryable %v)", tc.name, pod != nil, err, IsPodGone(err), IsInvalid(err), Retryable(err))
		}
		if pod != nil && IsMirror(pod, tc.want) != tc.mirror {
			t.Errorf("%s: mirror %v, want %v", tc.name, !tc.mirror, tc.mirror)
		}
	}

	down := fake.NewSimpleClientset()
	down.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	if _, err := LivePod(ctx, down, findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"}); !Retryable(err) || IsPodGone(err) {
		t.Errorf("outage: err %v, want retryable", err)
	}
	refused := fake.NewSimpleClientset()
	refused.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewBadRequest("no")
	})
	if _, err := LivePod(ctx, refused, findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"}); err == nil || Retryable(err) || IsPodGone(err) {
		t.Errorf("refusal: err %v, want final", err)
	}
	var status apierrors.APIStatus
	if _, err := LivePod(ctx, cs, findings.Pod{Namespace: "shop", Name: "web-2", UID: "u2"}); !errors.As(err, &status) || !apierrors.IsNotFound(err) {
		t.Errorf("not found: %v lost the API's status", err)
	}
}

// TestObjectName: the same parts give the same valid name, other parts
// another; the readable part is cleaned.
func TestObjectName(t *testing.T) {
	a, b := ObjectName("Web_1", "x", "y"), ObjectName("Web_1", "xy")
	if a == b || a != ObjectName("Web_1", "x", "y") {
		t.Errorf("names %q %q", a, b)
	}
	if want := "web-1" + nameInfix; a[:len(want)] != want {
		t.Errorf("name %q, want prefix %q", a, want)
	}
}
