//go:build !hookonly && !agentonly

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/kubeauth"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/certtest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// tokenReviews is how many TokenReviews the API server has answered, from
// its own apiserver_request_total.
func tokenReviews(t *testing.T, cs kubernetes.Interface) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("API server metrics: %v", err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `resource="tokenreviews"`) {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		n += int(v)
	}
	return n
}

// TestSecureMetricsTokenFlood: 40 clients sending random bearer tokens to
// the forwarder's TLS metrics port, as fast as they are answered, while
// findings arrive. Before, every new token was reviewed through the
// forwarder's own client, whose rate limit carries the Events too: no
// Event in 120 s. Now the reviews have a budget and a client of their
// own: every finding's Event is posted during the flood, and the
// TokenReviews the API server counts stay within the budget.
func TestSecureMetricsTokenFlood(t *testing.T) {
	e := newFwdEnv(t)
	for _, f := range []string{"../packaging/rbac/metrics.yaml", "../packaging/secure-metrics/review.yaml"} {
		kubetest.Apply(t, e.cs, f)
	}
	kubetest.Namespace(t, e.cs, "shop")
	var pods []*corev1.Pod
	var recs []findings.Record
	for i := range 20 {
		p := kubetest.Pod(t, e.cs, "shop", fmt.Sprintf("flood-%02d", i), nil, "")
		pods = append(pods, p)
		recs = append(recs, fwdRecord(p, string(p.UID), fmt.Sprintf("fp-%02d", i), "app"))
	}
	certs := t.TempDir()
	certtest.Write(t, certs, "flood")
	secure := nstest.FreeAddr(t)
	e.start(t, "--secure-metrics-addr", secure,
		"--tls-cert-file", filepath.Join(certs, "tls.crt"), "--tls-private-key-file", filepath.Join(certs, "tls.key"))
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	if code, body := waitGet(t, client, "https://"+secure+"/metrics", "warm-up"); code != http.StatusUnauthorized {
		t.Fatalf("warm-up token: %d %q, want 401", code, body)
	}

	before := tokenReviews(t, e.cs)
	start := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sent, busy atomic.Int64
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				b := make([]byte, 24)
				_, _ = rand.Read(b)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+secure+"/metrics", nil)
				req.Header.Set("Authorization", "Bearer "+hex.EncodeToString(b))
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				sent.Add(1)
				if resp.StatusCode == http.StatusTooManyRequests {
					busy.Add(1)
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	// The flood is on before the findings come.
	waitForLong(t, "the flood to start", 60*time.Second, func() bool { return sent.Load() >= 100 })
	e.append(t, recs...)
	e.waitDelivered(t, 120*time.Second, pods, 1)
	stop()
	wg.Wait()
	elapsed := time.Since(start)
	reviews := tokenReviews(t, e.cs) - before
	// The budget over the flood's time as the test saw it (at least the
	// forwarder's), and one more second of refill for the last requests.
	bound := kubeauth.ReviewBurst + int(kubeauth.ReviewQPS*(elapsed.Seconds()+1))
	t.Logf("%d requests with random tokens in %s (%d answered 429), %d TokenReviews (bound %d); 20 Events posted",
		sent.Load(), elapsed.Round(time.Millisecond), busy.Load(), reviews, bound)
	if reviews > bound {
		t.Fatalf("%d TokenReviews during the flood, bound %d", reviews, bound)
	}
	if busy.Load() == 0 {
		t.Fatal("no request was answered 429: the budget was never reached")
	}
}
