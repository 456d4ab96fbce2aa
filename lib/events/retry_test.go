package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestRetryable(t *testing.T) {
	events := schema.GroupResource{Group: "events.k8s.io", Resource: "events"}
	terminating := apierrors.NewForbidden(events, "x", errors.New("unable to create new content in namespace shop because it is being terminated"))
	terminating.ErrStatus.Details.Causes = append(terminating.ErrStatus.Details.Causes, metav1.StatusCause{Type: corev1.NamespaceTerminatingCause})

	cases := []struct {
		name string
		err  error
		want bool
	}{
		{name: "connection refused", err: &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, want: true},
		{name: "eof", err: fmt.Errorf("create event: %w", io.EOF), want: true},
		{name: "client timeout", err: context.DeadlineExceeded, want: true},
		{name: "429", err: apierrors.NewTooManyRequests("slow down", 1), want: true},
		{name: "500", err: apierrors.NewInternalError(errors.New("etcd")), want: true},
		{name: "503", err: apierrors.NewServiceUnavailable("later"), want: true},
		{name: "504", err: apierrors.NewTimeoutError("etcd slow", 1), want: true},
		{name: "server timeout", err: apierrors.NewServerTimeout(events, "create", 1), want: true},
		{name: "401", err: apierrors.NewUnauthorized("token expired"), want: true},
		{name: "403 rbac", err: apierrors.NewForbidden(events, "x", errors.New("no rbac")), want: true},
		{name: "403 namespace terminating", err: fmt.Errorf("create event: %w", terminating), want: false},
		{name: "404 namespace gone", err: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop"), want: false},
		{name: "422", err: apierrors.NewInvalid(schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}, "x", field.ErrorList{field.Invalid(field.NewPath("note"), "", "too long")}), want: false},
		{name: "400", err: apierrors.NewBadRequest("bad"), want: false},
		{name: "409 conflict", err: apierrors.NewConflict(events, "x", errors.New("changed")), want: false},
		{name: "413", err: apierrors.NewRequestEntityTooLargeError("big"), want: false},
		{name: "405", err: apierrors.NewMethodNotSupported(events, "create"), want: false},
		{name: "nil", err: nil, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Retryable(tc.err); got != tc.want {
				t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
