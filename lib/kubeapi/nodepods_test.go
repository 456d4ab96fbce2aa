package kubeapi

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestNodePodsTimeout: with the forwarder's clients, an API server that
// never answers a pod's GET or the node's LIST costs LivePod or the
// watch one request timeout, not the forwarder's line for good, and the
// watch itself outlives the timeout.
func TestNodePodsTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		// watchList: the API server serves the watch's initial list (as
		// 1.35's does), else only LISTs, which hang.
		watchList bool
	}{
		{name: "a GET that never answers", watchList: true},
		{name: "a LIST that never answers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quit := make(chan struct{})
			hang := func(r *http.Request) {
				select {
				case <-quit:
				case <-r.Context().Done():
				}
			}
			var lists, watchesEnded atomic.Int64
			// Over TLS and HTTP/2, as client-go speaks to an API server.
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path != "/api/v1/pods":
					hang(r) // the pod's GET
				case r.URL.Query().Get("watch") != "true":
					lists.Add(1)
					hang(r)
				case !tc.watchList:
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
						Status: metav1.StatusFailure, Code: http.StatusBadRequest, Reason: metav1.StatusReasonBadRequest, Message: "stand-in: no watch list"})
				default:
					defer watchesEnded.Add(1)
					w.Header().Set("Content-Type", "application/json")
					// The initial list's end, empty: synced.
					_, _ = io.WriteString(w, `{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
					w.(http.Flusher).Flush()
					hang(r)
				}
			}))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(quit) })
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pods, err := WatchNodePodsConfig(ctx, &rest.Config{Host: srv.URL, Timeout: timeout, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, "node-a")
			if err != nil {
				t.Fatal(err)
			}
			if !tc.watchList {
				// A LIST that timed out is made again, after the
				// reflector's backoff (about a second).
				deadline := time.Now().Add(10 * time.Second)
				for lists.Load() < 2 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if n := lists.Load(); n < 2 {
					t.Fatalf("%d LISTs in 10 s: a LIST that never answers stalls the watch for good", n)
				}
				return
			}
			if !pods.WaitSynced(ctx, 10*time.Second) {
				t.Fatal("the watch never synced")
			}
			// Like the forwarder's line: no deadline of its own.
			done := make(chan error, 1)
			go func() {
				_, err := pods.LivePod(ctx, findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"})
				done <- err
			}()
			select {
			case err := <-done:
				if !Retryable(err) {
					t.Errorf("LivePod = %v, want a retryable error", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("LivePod still waits on a GET that never answers after 10 s")
			}
			time.Sleep(timeout)
			if watchesEnded.Load() > 0 {
				t.Error("the watch ended within twice the request timeout: it is cut by it")
			}
		})
	}
}
