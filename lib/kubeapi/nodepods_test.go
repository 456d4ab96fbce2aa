package kubeapi

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestNodePodsTimeout: the node's pod watch alone goes without
// --request-timeout. A LIST that never answers is made again; the first
// list is a LIST, not a streamed list through the watch's client, so one
// of those that never answers cannot hold the watch unsynced; a pod's GET
// that never answers returns within the timeout; the watch itself
// outlives it.
func TestNodePodsTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		// hangList: LISTs never answer, else they give no pods.
		hangList bool
	}{
		{name: "a GET that never answers"},
		{name: "a LIST that never answers", hangList: true},
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
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.URL.Path != "/api/v1/pods":
					hang(r) // the pod's GET
				case r.URL.Query().Get("watch") != "true":
					lists.Add(1)
					if tc.hangList {
						hang(r)
						return
					}
					_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
				case r.URL.Query().Get("sendInitialEvents") == "true":
					// 1.35's streamed list, never answered.
					hang(r)
				default:
					defer watchesEnded.Add(1)
					w.WriteHeader(http.StatusOK)
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
			if tc.hangList {
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
				t.Fatal("the watch never synced: its first list went where nothing answers")
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
