package kubetest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Owned is a pod made by Workloads and the owner a resolver must name.
type Owned struct {
	Pod   *corev1.Pod
	Kind  string
	Owner string
}

// Workloads creates in namespace one object of each controller kind and
// pods owned through ownerReferences as their controllers would make them
// (no controller manager runs): Deployment web (ReplicaSet web-7c9, pods on
// node-a and node-b), StatefulSet db, DaemonSet agent, CronJob nightly (Job
// nightly-2901), Job once, a ReplicaSet without owner, a bare pod and a
// mirror pod owned by its Node. It returns them by pod name.
func Workloads(t testing.TB, cs kubernetes.Interface, namespace string) map[string]Owned {
	t.Helper()
	ctx := Ctx(t)
	labels := map[string]string{"app": "x"}
	sel := &metav1.LabelSelector{MatchLabels: labels}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	ref := func(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: new(true)}
	}
	meta := func(name string, owners ...metav1.OwnerReference) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, OwnerReferences: owners}
	}
	out := map[string]Owned{}
	pod := func(name, node, kind, owner string, annotations map[string]string, owners ...metav1.OwnerReference) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: meta(name, owners...), Spec: tmpl.Spec}
		p.Annotations = annotations
		p.Spec.NodeName = node
		p.Spec.AutomountServiceAccountToken = new(bool)
		got, err := cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
		check("pod "+name, err)
		out[name] = Owned{Pod: got, Kind: kind, Owner: owner}
	}

	dep, err := cs.AppsV1().Deployments(namespace).Create(ctx, &appsv1.Deployment{ObjectMeta: meta("web"),
		Spec: appsv1.DeploymentSpec{Selector: sel, Template: tmpl}}, metav1.CreateOptions{})
	check("deployment", err)
	rs, err := cs.AppsV1().ReplicaSets(namespace).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta("web-7c9", ref("apps/v1", "Deployment", dep.Name, dep.UID)),
		Spec: appsv1.ReplicaSetSpec{Selector: sel, Template: tmpl}}, metav1.CreateOptions{})
	check("replicaset", err)
	pod("web-7c9-aaaaa", "node-a", "Deployment", "web", nil, ref("apps/v1", "ReplicaSet", rs.Name, rs.UID))
	pod("web-7c9-bbbbb", "node-b", "Deployment", "web", nil, ref("apps/v1", "ReplicaSet", rs.Name, rs.UID))

	orphan, err := cs.AppsV1().ReplicaSets(namespace).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: meta("lone"),
		Spec: appsv1.ReplicaSetSpec{Selector: sel, Template: tmpl}}, metav1.CreateOptions{})
	check("replicaset", err)
	pod("lone-ccccc", "node-a", "ReplicaSet", "lone", nil, ref("apps/v1", "ReplicaSet", orphan.Name, orphan.UID))

	sts, err := cs.AppsV1().StatefulSets(namespace).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta("db"),
		Spec: appsv1.StatefulSetSpec{Selector: sel, Template: tmpl}}, metav1.CreateOptions{})
	check("statefulset", err)
	pod("db-0", "node-a", "StatefulSet", "db", nil, ref("apps/v1", "StatefulSet", sts.Name, sts.UID))

	ds, err := cs.AppsV1().DaemonSets(namespace).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta("agent"),
		Spec: appsv1.DaemonSetSpec{Selector: sel, Template: tmpl}}, metav1.CreateOptions{})
	check("daemonset", err)
	pod("agent-x1z2q", "node-b", "DaemonSet", "agent", nil, ref("apps/v1", "DaemonSet", ds.Name, ds.UID))

	jobTmpl := tmpl
	jobTmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	jobTmpl.Labels = nil
	cj, err := cs.BatchV1().CronJobs(namespace).Create(ctx, &batchv1.CronJob{ObjectMeta: meta("nightly"),
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: jobTmpl}}}}, metav1.CreateOptions{})
	check("cronjob", err)
	job, err := cs.BatchV1().Jobs(namespace).Create(ctx, &batchv1.Job{ObjectMeta: meta("nightly-2901", ref("batch/v1", "CronJob", cj.Name, cj.UID)),
		Spec: batchv1.JobSpec{Template: jobTmpl}}, metav1.CreateOptions{})
	check("job", err)
	pod("nightly-2901-ddddd", "node-a", "CronJob", "nightly", nil, ref("batch/v1", "Job", job.Name, job.UID))
	once, err := cs.BatchV1().Jobs(namespace).Create(ctx, &batchv1.Job{ObjectMeta: meta("once"),
		Spec: batchv1.JobSpec{Template: jobTmpl}}, metav1.CreateOptions{})
	check("job", err)
	pod("once-eeeee", "node-b", "Job", "once", nil, ref("batch/v1", "Job", once.Name, once.UID))

	pod("debug", "node-a", "Pod", "debug", nil)
	pod("etcd-node-a", "node-a", "StaticPod", "etcd-node-a", map[string]string{"kubernetes.io/config.mirror": "0a1b2c3d4e5f"},
		metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "node-a", UID: "node-a-uid", Controller: new(true)})
	return out
}
