package report

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// htmlReport is a report of every kind of row, one with the strings a
// forged Event carries.
func htmlReport(t *testing.T) Report {
	t.Helper()
	evil := "<img src=x onerror=alert(1)><script>document.title='pwned'</script>\u202e|\n"
	items := []Item{
		item("shop", "Deployment", "web", "web-1", findings.ImpactXt, []string{"istio"}, "-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
		item("shop", "StatefulSet", "db", "db-0", findings.ImpactLegacy, nil, "-A INPUT -p tcp --dport 5432 -j ACCEPT"),
		item("ops", "DaemonSet", "agent", "agent-x", findings.ImpactNative, []string{"calico"}, "-A INPUT -j ACCEPT"),
		item("evil", "Pod", evil, evil, findings.ImpactLegacy, []string{evil}, evil),
	}
	gs := GroupItems(items, []Expectation{{Owner: "DaemonSet/agent", Reason: "node agent"}})
	return Report{Groups: gs, FailOn: FailBreaks, Failing: Judge(gs, FailBreaks),
		Origin: Origin{Cluster: "https://api.example:6443", Context: "ci" + evil, From: []string{"events"}, Time: t0}}
}

func TestHTMLShape(t *testing.T) {
	r := htmlReport(t)
	var b bytes.Buffer
	if err := Write(&b, r, "html"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"<img", "<script", "\u202e", "http://", "src=\"", "href="} {
		if strings.Contains(out, bad) && !(bad == "http://" && strings.Contains(out, "xmlns=\"http://www.w3.org/2000/svg\"") && strings.Count(out, "http://") == 2) {
			t.Errorf("html holds %q:\n%s", bad, out)
		}
	}
	if n := strings.Count(out, `<tr class="workload"`); n != len(r.Groups) {
		t.Errorf("%d workload rows, want %d", n, len(r.Groups))
	}
	if !strings.Contains(out, `id="by-impact"`) || !strings.Contains(out, `id="by-vendor"`) || !strings.Contains(out, "https://api.example:6443 (context ci&lt;img") {
		t.Errorf("html lacks a chart or the origin:\n%s", out)
	}
}

// The vendor chart stays bounded whatever vendors the Events name.
func TestVendorCountsBounded(t *testing.T) {
	var gs []Group
	for i := range 40 {
		gs = append(gs, Group{Vendors: []findings.Vendor{{Name: strings.Repeat("v", i+1)}}})
	}
	gs = append(gs, Group{})
	c := vendorCounts(gs)
	if len(c) != chartVendors || c[len(c)-1].label != "30 others" || c[len(c)-1].n != 30 {
		t.Errorf("vendor counts %v", c)
	}
}

// TestHTMLInChromium opens the report in a real headless Chromium: the
// DOM has one row per workload and both charts with their bars, nothing of
// a forged Event became an element, and the page is drawn (a screenshot
// with the chart's colours, not blank).
func TestHTMLInChromium(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	nstest.Need(t, err == nil, "chromium (Debian chromium, tests/install-deps.sh)")
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	r := htmlReport(t)
	var b bytes.Buffer
	if err := Write(&b, r, "html"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	dom := chromium(t, bin, dir, "--dump-dom", "file://"+page)
	if n := strings.Count(dom, `<tr class="workload"`); n != len(r.Groups) {
		t.Errorf("DOM has %d workload rows, want %d:\n%s", n, len(r.Groups), dom)
	}
	for _, want := range []string{`<svg class="chart" id="by-impact"`, `<svg class="chart" id="by-vendor"`, `<table id="workloads">`, `<p class="origin" id="origin">`} {
		if !strings.Contains(dom, want) {
			t.Errorf("DOM lacks %s:\n%s", want, dom)
		}
	}
	// legacy, xt, native, unclassified, unknown; istio, calico, the
	// forged one, unknown.
	if n := strings.Count(dom, "<rect "); n != 5+4 {
		t.Errorf("DOM has %d bars, want 9", n)
	}
	if strings.Contains(dom, "<img") || strings.Contains(dom, "<script") || strings.Contains(dom, "pwned</title>") {
		t.Errorf("a forged value became markup:\n%s", dom)
	}

	shot := filepath.Join(dir, "shot.png")
	chromium(t, bin, dir, "--screenshot="+shot, "--window-size=1200,900", "file://"+page)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode screenshot: %v", err)
	}
	colours := map[[3]uint32]bool{}
	inked, red := 0, 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			cr, cg, cb = cr>>8, cg>>8, cb>>8
			colours[[3]uint32{cr, cg, cb}] = true
			if cr < 240 || cg < 240 || cb < 240 {
				inked++
			}
			if cr > 150 && cg < 90 && cb < 90 {
				red++
			}
		}
	}
	// A blank page is one colour; the legacy bar is red.
	if len(colours) < 8 || inked < 2000 || red < 200 {
		t.Errorf("screenshot looks blank: %d colours, %d inked pixels, %d red (legacy bar) of %v", len(colours), inked, red, bounds.Size())
	}
}

// chromium runs headless Chromium with args in its own process group and
// a profile under dir, and returns its stdout; the group is killed however
// the test ends.
func chromium(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	// The deadline only keeps a hung browser from hanging the suite.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--disable-breakpad", "--user-data-dir=" + filepath.Join(dir, "profile")}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Helpers (zygote, GPU, renderer) share the group; none outlives it.
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("chromium %v: %v (deadline: %v)\n%s", args, err, ctx.Err(), stderr.String())
	}
	return stdout.String()
}
