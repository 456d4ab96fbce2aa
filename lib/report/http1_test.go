package report

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// TestReportsListedOverHTTP1: the Reports' pages come over HTTP/1.1 from
// an API server that speaks HTTP/2, which the other clients of the same
// Cluster still use (overHTTP1).
func TestReportsListedOverHTTP1(t *testing.T) {
	var mu sync.Mutex
	proto := map[string]string{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		proto[r.URL.Path] = r.Proto
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/openreports.io/v1alpha1":
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"openreports.io/v1alpha1","resources":[{"name":"reports","singularName":"report","namespaced":true,"kind":"Report","verbs":["list"]}]}`))
		case "/apis/openreports.io/v1alpha1/reports":
			_, _ = w.Write([]byte(`{"kind":"ReportList","apiVersion":"openreports.io/v1alpha1","metadata":{},"items":[]}`))
		case "/version":
			_, _ = w.Write([]byte(`{"major":"1","minor":"35","gitVersion":"v1.35.0"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := Connect(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var sk Skipped
	if err := clusterReports(context.Background(), c, &sk, func(Item) {}, func(string, int) {}); err == nil {
		t.Error("no error for a cluster without Reports of ours")
	}
	if _, err := c.Client.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := proto["/apis/openreports.io/v1alpha1/reports"]; got != "HTTP/1.1" {
		t.Errorf("Reports listed over %q, want HTTP/1.1 (every request: %v)", got, proto)
	}
	if got := proto["/version"]; got != "HTTP/2.0" {
		t.Errorf("the Cluster's own client asked over %q, want HTTP/2.0: the server would not show the difference", got)
	}
}
