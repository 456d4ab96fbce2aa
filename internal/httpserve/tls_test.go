package httpserve

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/certtest"
)

// served is the certificate the server at addr presents.
func served(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
		t.Errorf("negotiated %q, want HTTP/1.1 only", p)
	}
	return conn.ConnectionState().PeerCertificates[0]
}

// TestTLS: HTTPS only, on HTTP/1.1 (HTTP/2 offered by the client is not
// taken), and a certificate rotated in the mounted Secret is served from
// the next connection on, without a restart.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	first := certtest.Write(t, dir, "first")
	certs, err := LoadCertFiles(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start(Options{Addr: "127.0.0.1:0", TLS: &tls.Config{GetCertificate: certs.GetCertificate},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "page") })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })

	pool := x509.NewCertPool()
	pool.AddCert(first)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + srv.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "page" || resp.ProtoMajor != 1 {
		t.Fatalf("got %s %s %q", resp.Proto, resp.Status, b)
	}

	// Plain HTTP to the TLS port: no page.
	plain := &http.Client{Timeout: 30 * time.Second}
	if resp, err := plain.Get("http://" + srv.Addr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(b), "page") {
			t.Fatalf("plain HTTP served: %s %q", resp.Status, b)
		}
	}

	if got := served(t, srv.Addr); !got.Equal(first) {
		t.Fatalf("serves %s, want first", got.Subject.CommonName)
	}
	second := certtest.Write(t, dir, "second")
	if got := served(t, srv.Addr); !got.Equal(second) {
		t.Fatalf("after rotation serves %s, want second", got.Subject.CommonName)
	}
	// A pair that does not load (a key that is not one) keeps the second
	// in service.
	if err := os.Remove(filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := served(t, srv.Addr); !got.Equal(second) {
		t.Fatalf("with a broken key serves %s, want second", got.Subject.CommonName)
	}
}

// TestLoadCertFilesMissing: a missing pair at start is an error naming it.
func TestLoadCertFilesMissing(t *testing.T) {
	_, err := LoadCertFiles("/nonexistent/tls.crt", "/nonexistent/tls.key")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/tls.crt") {
		t.Fatalf("err = %v", err)
	}
}

// TestUpstream: the page is passed through; an upstream down or failing
// is a 502, not an empty page.
func TestUpstream(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, "iptables_alerter_agent_connected 1\n")
	}))
	defer up.Close()
	cases := []struct {
		name, url string
		want      int
		body      string
	}{
		{name: "up", url: up.URL + "/metrics", want: 200, body: "iptables_alerter_agent_connected 1\n"},
		{name: "failing", url: up.URL + "/other", want: 502, body: "500"},
		{name: "down", url: "http://127.0.0.1:1/metrics", want: 502, body: "fetch upstream metrics"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Upstream(tc.url).ServeHTTP(w, httptest.NewRequest("GET", "/metrics/agent", nil))
			if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.body) {
				t.Fatalf("got %d %q, want %d %q", w.Code, w.Body, tc.want, tc.body)
			}
			if tc.want == 200 && w.Header().Get("Content-Type") != "text/plain; version=0.0.4" {
				t.Fatalf("content type %q", w.Header().Get("Content-Type"))
			}
		})
	}
}
