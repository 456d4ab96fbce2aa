package openreports_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// listPath is the node's Reports' list, once a writer.
const listPath = "/apis/openreports.io/v1alpha1/reports"

// TestForwardRequests runs the forwarder's path (the node's pod watch,
// the Events, the Reports staged and flushed before each checkpoint save)
// over a real kube-apiserver and counts its requests: a workload's
// findings between two saves cost their Event creates, one owner lookup
// and one Report write (the node's Reports listed once a writer, so a
// new one needs no GET), not a pod GET and a Report GET and write each.
// Then someone else changes the Report: the remembered copy's write gets
// a 409, which reads the Report again and keeps both changes.
func TestForwardRequests(t *testing.T) {
	c, _, owned := start(t)
	// The watch and the keeper live as long as the test; each call gets
	// its own minute (a loaded machine's 55 calls may outlast one).
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	counted := &calls{n: map[string]int{}}
	cs, rc := wrappedClients(t, c, counted.wrap)
	// The test's own reads and writes go uncounted.
	admin, err := versioned.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	rs := owned["web-7c9-aaaaa"].Pod.OwnerReferences[0]
	const n = 20
	var pods []*corev1.Pod
	for i := range n + 1 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-7c9-n%02d", i), Namespace: "shop", OwnerReferences: []metav1.OwnerReference{rs}},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		got, err := c.Client().CoreV1().Pods("shop").Create(kubetest.Ctx(t), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, got)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	nodePods := kubeapi.WatchNodePods(life, cs, "node-a")
	if !nodePods.WaitSynced(life, time.Minute) {
		t.Fatal("node's pod watch never synced")
	}
	poster := events.New(cs, "node-a", false)
	poster.Live = nodePods.LivePod
	ev := events.NewConsumer(poster, log, kubeapi.NewRefusals())
	w := openreports.New(cs, rc, "node-a")
	w.Live = nodePods.LivePod
	keeper := openreports.NewKeeper(w, rc, cs, log)
	keeper.Posted = ev.Posted
	keeper.Start(life)
	if !keeper.Enabled() {
		t.Fatal("Reports not enabled")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "findings.jsonl")
	r := &consumer.Runner{Findings: file, Store: follow.FileStore(filepath.Join(dir, "checkpoint.json")), Batch: 64, Log: log,
		Consumers: []consumer.Named{{Name: "events", Consumer: ev}, {Name: "reports", Consumer: keeper}}}
	appendLines := func(pods ...*corev1.Pod) {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range pods {
			line, err := findings.Encode(record(p, findings.StatePresent, 0, 1, 0))
			if err != nil {
				t.Fatal(err)
			}
			f.Write(line)
		}
	}
	counted.reset()
	appendLines(pods[:n]...)
	if err := r.Once(kubetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"POST events": n, "GET replicasets": 1, "GET " + listPath: 1, "POST reports": 1}
	got := counted.take()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("API calls for %d findings of one workload (-want +got):\n%s", n, diff)
	}
	if total := sum(got); float64(total) > 1.5*n {
		t.Errorf("%d API calls for %d findings, over 1.5 a finding", total, n)
	}
	name := openreports.Name(owner.Owner{Kind: "Deployment", Name: "web"}, "node-a")
	rep := get(t, admin, "shop", name)
	if len(rep.Results) != n {
		t.Errorf("report holds %d results, want %d", len(rep.Results), n)
	}

	// Someone else's change since the forwarder's write.
	rep.Annotations = map[string]string{"example.com/seen": "yes"}
	if _, err := admin.OpenreportsV1alpha1().Reports("shop").Update(kubetest.Ctx(t), rep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	appendLines(pods[n])
	if err := r.Once(kubetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	want = map[string]int{"POST events": 1, "PUT reports": 2, "GET reports": 1}
	if diff := cmp.Diff(want, counted.take()); diff != "" {
		t.Errorf("API calls after someone else's write (-want +got):\n%s", diff)
	}
	rep = get(t, admin, "shop", name)
	if len(rep.Results) != n+1 || rep.Annotations["example.com/seen"] != "yes" {
		t.Errorf("report holds %d results (want %d), annotations %v: a change was lost", len(rep.Results), n+1, rep.Annotations)
	}
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}
