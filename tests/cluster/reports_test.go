package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nritest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/report"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// eventTTL is the API server's --event-ttl in TestReportsOutliveEvents:
// short, so the Events expire while the test runs.
const eventTTL = 30 * time.Second

// generous bounds each wait of TestReportsOutliveEvents: a liveness bound
// on a shared machine, never a verdict on speed.
const generous = 4 * time.Minute

// linkerdNAT is the shape of what Linkerd's proxy-init writes with
// iptablesMode=nft, for iptables-nft-restore: xt matches and targets in
// nftables, under the chains the vendor table knows.
const linkerdNAT = `*nat
:PROXY_INIT_REDIRECT - [0:0]
:PROXY_INIT_OUTPUT - [0:0]
-A PREROUTING -p tcp -j PROXY_INIT_REDIRECT
-A PROXY_INIT_REDIRECT -p tcp --dport 4190 -j RETURN
-A PROXY_INIT_REDIRECT -p tcp -j REDIRECT --to-ports 4143
-A OUTPUT -p tcp -j PROXY_INIT_OUTPUT
-A PROXY_INIT_OUTPUT -m owner --uid-owner 2102 -j RETURN
-A PROXY_INIT_OUTPUT -p tcp -j REDIRECT --to-ports 4140
COMMIT
`

// runHookAt runs the hook binary the way CRI-O runs a poststart hook: a
// separate process given the container's OCI state on stdin, its bundle's
// config.json naming the pod's network namespace, the kubelet's labels as
// annotations.
func runHookAt(t *testing.T, bin string, pod *corev1.Pod, netns string, args ...string) {
	t.Helper()
	bundle := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "linux": map[string]any{
		"namespaces": []map[string]string{{"type": "mount"}, {"type": "network", "path": netns}}}})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	state, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": "ctr-" + pod.Name, "status": "running", "pid": os.Getpid(), "bundle": bundle,
		"annotations": map[string]string{
			"io.kubernetes.cri-o.SandboxID":          "sb-" + pod.Name,
			"io.kubernetes.cri-o.UserRequestedImage": "registry.example/app:1",
			"io.kubernetes.pod.namespace":            pod.Namespace,
			"io.kubernetes.pod.name":                 pod.Name,
			"io.kubernetes.pod.uid":                  string(pod.UID),
			"io.kubernetes.container.name":           "app",
		}})
	cmd := exec.Command(bin, append([]string{"hook", "--stage", "poststart"}, args...)...)
	cmd.Stdin = strings.NewReader(string(state))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hook: %v (a hook always exits 0)\n%s", err, out)
	}
}

// ourEvents lists the pod Events our forwarder posted, of either reason.
func ourEvents(ctx context.Context, cs kubernetes.Interface) ([]corev1.Event, error) {
	var out []corev1.Event
	for _, reason := range []string{events.Reason, events.UnknownReason} {
		l, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", reason).String()})
		if err != nil {
			return nil, err
		}
		for _, e := range l.Items {
			if e.ReportingController == events.Controller {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// watchPosted watches the API's Events from now on and sends the UID of
// each pod one of ours is posted on. A watch sees every Event created,
// however short it lives, so the test cannot miss one on a slow machine.
func watchPosted(t *testing.T, cs kubernetes.Interface) <-chan types.UID {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sel := fields.OneTermEqualSelector("reason", events.Reason).String()
	l, err := cs.CoreV1().Events("").List(kubetest.Ctx(t), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, l.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return cs.CoreV1().Events("").Watch(ctx, o)
		}})
	if err != nil {
		t.Fatalf("watch events: %v", err)
	}
	uids := make(chan types.UID, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range rw.ResultChan() {
			if e, ok := ev.Object.(*corev1.Event); ok && ev.Type == watch.Added && e.ReportingController == events.Controller {
				select {
				case uids <- e.InvolvedObject.UID:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		rw.Stop()
		cancel()
		<-done
	})
	return uids
}

// TestReportsOutliveEvents is issue 16's done-when, chained end to end on
// a real kube-apiserver that keeps Events only eventTTL and a real
// kube-controller-manager's garbage collector, with the Report CRD the
// module ships: the real hook binary, run as CRI-O runs it, inspects a
// Deployment's pod (Istio's rules by iptables-nft); the real agent, told
// of a StatefulSet's pod by the runtime side of NRI in this process,
// inspects it (Linkerd's rules by iptables-nft and an iptables-legacy
// rule); the real forwarder, with the shipped RBAC, posts their Events and
// writes their Reports. A rule written into the StatefulSet's pod after
// the agent started is heard by the agent's watch, and the writing
// process named. Once the API server has deleted every Event of ours,
// `iptables-alerter report` with the shipped report RBAC still lists both
// workloads from the Reports, each with its worst level, vendor, hint and
// doc link, and the StatefulSet with the rule's writer; deleting the Deployment makes the garbage collector delete its
// Report, and the StatefulSet's stays.
func TestReportsOutliveEvents(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore", "iptables-legacy")
	c := kubetest.StartArgs(t, "--event-ttl="+eventTTL.String())
	cs := c.Client()
	gv := openreportsv1alpha1.SchemeGroupVersion.String()
	c.CRD(t, filepath.Join(repoRoot(), "packaging", "crds", "openreports.io_reports.yaml"), gv, "reports")
	kcmLog := c.ControllerManager(t, "garbagecollector")
	rc, err := versioned.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Apply(t, cs, filepath.Join(repoRoot(), "packaging", "rbac", "forward.yaml"))
	kubetest.Apply(t, cs, filepath.Join(repoRoot(), "packaging", "rbac", "report.yaml"))
	kubetest.Namespace(t, cs, "shop")
	owned := kubetest.Workloads(t, cs, "shop")
	web, db := owned["web-7c9-aaaaa"].Pod, owned["db-0"].Pod
	bin := alerterBin(t)
	work := t.TempDir()
	file, seen := filepath.Join(work, "findings.jsonl"), filepath.Join(work, "seen")
	// No admin files: the built-in allowlist and vendor table.
	common := []string{"--node", "node-a", "--findings", file, "--state-dir", seen,
		"--allowlist", filepath.Join(work, "no-allowlist.json"), "--vendors", filepath.Join(work, "no-vendors.json")}

	webNS := nstest.New(t)
	webNS.Restore(nstest.IstioNAT, "iptables-nft-restore")
	dbNS := nstest.New(t)
	dbNS.Restore(linkerdNAT, "iptables-nft-restore")
	dbNS.Run("iptables-legacy", "-A", "INPUT", "-p", "tcp", "--dport", "5432", "-j", "ACCEPT")

	posted := watchPosted(t, cs)
	runHookAt(t, bin, web, webNS.Path(), common...)

	sandbox := &api.PodSandbox{Id: "sb-" + db.Name, Name: db.Name, Namespace: db.Namespace, Uid: string(db.UID),
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: dbNS.Path()}}}}
	ctr := &api.Container{Id: "ctr-" + db.Name, PodSandboxId: sandbox.Id, Name: "app", State: api.ContainerState_CONTAINER_RUNNING}
	ad, sock, err := nritest.Start(t.TempDir(), func(ctx context.Context, cb nri.SyncCB) error {
		_, err := cb(ctx, []*api.PodSandbox{sandbox}, []*api.Container{ctr})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ad.Stop)
	// A stand-in host /proc: this sandbox may not open pid 1's netns. The
	// agent's own netns is the "node's"; the writer is shown in it below.
	hostProc := nstest.HostProc(t, "/proc/self/ns/net")
	agent := startProc(t, "agent", exec.Command(bin, append([]string{"agent", "--nri-socket", sock, "--health-addr", "", "--host-proc", hostProc}, common...)...))
	fwd := startProc(t, "forward", exec.Command(bin, "forward", "--kubeconfig", c.Kubeconfig("forward", kubetest.Token(t, cs, "iptables-alerter", "iptables-alerter-forward")),
		"--findings", file, "--checkpoint-dir", filepath.Join(work, "fwd"), "--node-name", "node-a", "--health-addr", ""))

	// Both pods' Events were posted (the watch saw them) and both
	// workloads' Reports written.
	want := map[types.UID]bool{web.UID: true, db.UID: true}
	for deadline := time.Now().Add(generous); len(want) > 0; {
		select {
		case uid := <-posted:
			delete(want, uid)
		case <-time.After(time.Until(deadline)):
			t.Fatalf("no Event posted on pods %v after %s\nfindings:\n%s\nagent:\n%s\nforward:\n%s", want, generous, tail(file, 3000), agent, fwd)
		}
	}
	names := map[string]string{}
	for what, o := range map[string]kubetest.Owned{"web": owned[web.Name], "db": owned[db.Name]} {
		names[what] = openreports.Name(owner.Owner{Kind: o.Kind, Name: o.Owner}, "node-a")
	}
	for what, name := range names {
		poll(t, "Report "+name+" of "+what+" written", func() (bool, error) {
			_, err := rc.OpenreportsV1alpha1().Reports("shop").Get(kubetest.Ctx(t), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		})
	}

	// After the agent started, a process writes a rule into db's netns:
	// the agent's watch hears the commit, its finding names the writer,
	// and db's Report says who. The commit waits for the watch's monitor
	// (a commit before it is not the watch's to see).
	poll(t, "the agent's monitor in db's netns", func() (bool, error) { return monitored(dbNS) })
	restore, pid := dbNS.Restorer(hostProc)
	if _, err := io.WriteString(restore, "*filter\n-A INPUT -p tcp --dport 9999 -j ACCEPT\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	wantWriter := fmt.Sprintf("iptables-nft-re (pid %d, parent ", pid)
	poll(t, "db's Report naming the writer "+wantWriter+"...", func() (bool, error) {
		r, err := rc.OpenreportsV1alpha1().Reports("shop").Get(kubetest.Ctx(t), names["db"], metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, x := range r.Results {
			if strings.HasPrefix(x.Properties[openreports.PropWriter], wantWriter) {
				return true, nil
			}
		}
		return false, fmt.Errorf("results %+v\nfindings:\n%s\nagent:\n%s\nforward:\n%s", r.Results, tail(file, 3000), agent, fwd)
	})

	// The API server deletes the Events once their TTL passed.
	poll(t, "Events of ours still listed", func() (bool, error) {
		evs, err := ourEvents(kubetest.Ctx(t), cs)
		return err == nil && len(evs) == 0, err
	})

	out, err := exec.Command(bin, "report", "--kubeconfig", c.Kubeconfig("report", kubetest.Token(t, cs, "iptables-alerter", "iptables-alerter-report")),
		"--format", "json").Output()
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	var r report.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report output is not JSON: %v\n%s", err, out)
	}
	if strings.Join(r.Origin.From, ",") != "reports" {
		t.Errorf("report read %v, want reports", r.Origin.From)
	}
	got := map[string]report.Group{}
	for _, g := range r.Groups {
		got[g.Namespace+"/"+g.Owner.String()] = g
	}
	for key, w := range map[string]struct{ pod, worst, vendor, hint, doc, writer string }{
		"shop/Deployment/web": {web.Name, findings.ImpactXt, "istio", "Istio 1.27+", "https://istio.io/", ""},
		"shop/StatefulSet/db": {db.Name, findings.ImpactLegacy, "linkerd", "Linkerd's charts default to proxyInit.iptablesMode=nft", "https://linkerd.io/", wantWriter},
	} {
		g, ok := got[key]
		hint, doc := g.Hint()
		writers := strings.Join(g.Writers, "; ")
		if !ok || strings.Join(g.Pods, ",") != w.pod || strings.Join(g.Nodes, ",") != "node-a" || g.Worst != w.worst ||
			g.VendorNames() != w.vendor || !strings.HasPrefix(hint, w.hint) || !strings.HasPrefix(doc, w.doc) || g.State != findings.StatePresent ||
			!strings.HasPrefix(writers, w.writer) || (w.writer == "") != (writers == "") {
			t.Errorf("%s: %+v; want pod %s on node-a, worst %s, vendor %s, hint %q..., doc %q..., writer %q...", key, g, w.pod, w.worst, w.vendor, w.hint, w.doc, w.writer)
		}
	}
	if len(r.Groups) != 2 {
		t.Errorf("%d groups, want web and db: %s", len(r.Groups), out)
	}

	// The Deployment goes (its ReplicaSet and pod after it): the garbage
	// collector deletes its Report through the owner reference.
	if err := cs.AppsV1().Deployments("shop").Delete(kubetest.Ctx(t), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "Report of the deleted Deployment still there", func() (bool, error) {
		_, err := rc.OpenreportsV1alpha1().Reports("shop").Get(kubetest.Ctx(t), names["web"], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err == nil {
			err = fmt.Errorf("still there; kube-controller-manager log:\n%s", tail(kcmLog, 3000))
		}
		return false, err
	})
	if _, err := rc.OpenreportsV1alpha1().Reports("shop").Get(kubetest.Ctx(t), names["db"], metav1.GetOptions{}); err != nil {
		t.Errorf("the StatefulSet's Report: %v, want it kept", err)
	}
}

// monitored tells whether a process holds an nftables monitor in ns: a
// NETLINK_NETFILTER socket (protocol 12) that joined NFNLGRP_NFTABLES
// (group 7: bit 6 of the groups column). /proc/net/netlink lists the
// sockets of the reader's netns.
func monitored(ns *nstest.NS) (bool, error) {
	out, err := ns.Exec("cat", "/proc/net/netlink")
	if err != nil {
		return false, fmt.Errorf("read /proc/net/netlink in %s: %w: %s", ns.Name, err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[1] != "12" {
			continue
		}
		if g, err := strconv.ParseUint(f[3], 16, 32); err == nil && g&(1<<6) != 0 {
			return true, nil
		}
	}
	return false, fmt.Errorf("no nftables monitor in %s:\n%s", ns.Name, out)
}

// poll calls ok until it returns true, failing the test with its last
// error after generous.
func poll(t *testing.T, what string, ok func() (bool, error)) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(generous); ; time.Sleep(250 * time.Millisecond) {
		var done bool
		if done, err = ok(); done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after %s: %v", what, generous, err)
		}
	}
}
