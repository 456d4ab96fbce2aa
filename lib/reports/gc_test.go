package reports_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/reports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestPrune drops the result of a pod that is gone once the grace passed
// and keeps the live pod's.
func TestPrune(t *testing.T) {
	c, rc, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	w := reports.New(cs, rc, "node-a")
	a, b := owned["web-7c9-aaaaa"].Pod, owned["web-7c9-bbbbb"].Pod
	var name string
	for _, p := range []string{a.Name, b.Name} {
		res, err := w.Write(ctx, record(owned[p].Pod, findings.StatePresent, 0, 1, 0))
		if err != nil || res.Outcome != reports.Written {
			t.Fatalf("Write = %+v, %v", res, err)
		}
		name = res.Name
	}
	// No kubelet runs to finish a graceful delete.
	if err := cs.CoreV1().Pods("shop").Delete(ctx, a.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	// Within the grace nothing goes.
	if n, err := w.Prune(ctx); n != 0 || err != nil {
		t.Fatalf("Prune within grace = %d, %v", n, err)
	}
	w.Grace = time.Nanosecond
	if n, err := w.Prune(ctx); n != 1 || err != nil {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	r := get(t, rc, "shop", name)
	if len(r.Results) != 1 || r.Results[0].Subjects[0].Name != b.Name {
		t.Errorf("after prune: %+v", r.Results)
	}
}

// TestGarbageCollected deletes the Deployment: kube-controller-manager's
// garbage collector must delete its Report through the owner reference.
func TestGarbageCollected(t *testing.T) {
	kcm := filepath.Join(filepath.Dir(kubetest.APIServerPath()), "kube-controller-manager")
	if _, err := os.Stat(kcm); err != nil {
		kubetest.Need(t)
		nstest.Need(t, false, "needs "+kcm+" (tests/kube/build-kube.sh kube-controller-manager)")
	}
	c, rc, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	kc := c.Kubeconfig("gc", c.AdminToken)
	cmd := exec.Command(kcm, "--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--controllers=garbagecollector", "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0")
	log, err := os.Create(filepath.Join(t.TempDir(), "kcm.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
	w := reports.New(cs, rc, "node-a")
	res, err := w.Write(ctx, record(owned["web-7c9-aaaaa"].Pod, findings.StatePresent, 1, 0, 0))
	if err != nil || res.Outcome != reports.Written {
		t.Fatalf("Write = %+v, %v", res, err)
	}
	if err := cs.AppsV1().Deployments("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := rc.OpenreportsV1alpha1().Reports("shop").Get(ctx, res.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("report %s not garbage-collected after 3 minutes (%v); kube-controller-manager log:\n%s", res.Name, err, b)
		}
	}
}
