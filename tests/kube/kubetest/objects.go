package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// Apply creates every object of a multi-document YAML file, the way
// `kubectl create -f` would, for the kinds RBAC and admission policy manifests hold.
func Apply(t testing.TB, cs kubernetes.Interface, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	ctx := Ctx(t)
	for i, doc := range splitYAML(data) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode %s document %d: %v", path, i, err)
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s document %d: kind %T not supported by Apply", path, i, obj)
		}
		if err != nil {
			t.Fatalf("create %s document %d: %v", path, i, err)
		}
	}
}

// splitYAML cuts a file at its "---" lines, dropping empty documents.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		keep := false
		for _, l := range strings.Split(string(d), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				keep = true
				break
			}
		}
		if keep {
			docs = append(docs, d)
		}
	}
	return docs
}

// Token mints a service-account token with the TokenRequest API.
func Token(t testing.TB, cs kubernetes.Interface, namespace, name string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(Ctx(t), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request token for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// Namespace creates a namespace.
func Namespace(t testing.TB, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(Ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %q: %v", name, err)
	}
}

// Pod creates a pod object (no kubelet runs it) and returns it. A mirror
// pod (annotation kubernetes.io/config.mirror) must name its node.
func Pod(t testing.TB, cs kubernetes.Interface, namespace, name string, annotations map[string]string, node string) *corev1.Pod {
	t.Helper()
	return createPod(t, cs, metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: annotations}, node)
}

// OwnedPod creates a pod object whose controller is ref, as given: the
// API server checks no owner reference, and no garbage collector runs.
func OwnedPod(t testing.TB, cs kubernetes.Interface, namespace, name, node string, ref metav1.OwnerReference) *corev1.Pod {
	t.Helper()
	ref.Controller = new(true)
	return createPod(t, cs, metav1.ObjectMeta{Name: name, Namespace: namespace, OwnerReferences: []metav1.OwnerReference{ref}}, node)
}

func createPod(t testing.TB, cs kubernetes.Interface, meta metav1.ObjectMeta, node string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			AutomountServiceAccountToken: new(bool),
			NodeName:                     node,
		},
	}
	out, err := cs.CoreV1().Pods(meta.Namespace).Create(Ctx(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", meta.Namespace, meta.Name, err)
	}
	return out
}

// RemakeStatefulSet deletes StatefulSet name and makes one again under
// its name: another object, with another UID. Its pods are left as they
// are (no controller runs to adopt or delete them).
func RemakeStatefulSet(t testing.TB, cs kubernetes.Interface, namespace, name string) *appsv1.StatefulSet {
	t.Helper()
	ctx := Ctx(t)
	if err := cs.AppsV1().StatefulSets(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete statefulset %s/%s: %v", namespace, name, err)
	}
	labels := map[string]string{"app": name + "-again"}
	sts, err := cs.AppsV1().StatefulSets(namespace).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create statefulset %s/%s: %v", namespace, name, err)
	}
	return sts
}

// Events lists the Events about an object the way `kubectl describe` finds
// them: core/v1 events selected by involvedObject name, namespace, kind and
// uid.
func Events(ctx context.Context, cs kubernetes.Interface, namespace, kind, name string, uid types.UID) ([]corev1.Event, error) {
	sel := fields.Set{
		"involvedObject.name": name,
		"involvedObject.kind": kind,
		"involvedObject.uid":  string(uid),
	}
	if namespace != "" {
		sel["involvedObject.namespace"] = namespace
	}
	l, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: sel.AsSelector().String()})
	if err != nil {
		return nil, fmt.Errorf("list events of %s %s/%s: %w", kind, namespace, name, err)
	}
	return l.Items, nil
}

// WaitEvents polls Events until want returns true on them, or fails.
func WaitEvents(t testing.TB, cs kubernetes.Interface, limit time.Duration, namespace, kind, name string, uid types.UID, want func([]corev1.Event) bool) []corev1.Event {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last []corev1.Event
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		last, lastErr = Events(ctx, cs, namespace, kind, name, uid)
		cancel()
		if lastErr == nil && want(last) {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("events of %s %s/%s not as wanted after %s: %d events, last error %v", kind, namespace, name, limit, len(last), lastErr)
	return nil
}
