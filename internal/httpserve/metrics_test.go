package httpserve

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// flaky is a collector whose gathering fails while fail is set.
type flaky struct{ fail atomic.Bool }

var flakyDesc = prometheus.NewDesc("test_flaky", "A gauge that fails to collect when told.", nil, nil)

func (f *flaky) Describe(ch chan<- *prometheus.Desc) { ch <- flakyDesc }
func (f *flaky) Collect(ch chan<- prometheus.Metric) {
	if f.fail.Load() {
		ch <- prometheus.NewInvalidMetric(flakyDesc, errors.New("told to fail"))
		return
	}
	ch <- prometheus.MustNewConstMetric(flakyDesc, prometheus.GaugeValue, 1)
}

// TestMetrics: the /metrics handler gives the text format by default,
// OpenMetrics when asked, gzip when accepted, and a 500 when gathering
// fails, counted in promhttp_metric_handler_errors_total on the next page.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := &flaky{}
	reg.MustRegister(f)
	h := Metrics(reg)
	get := func(header map[string]string) *http.Response {
		t.Helper()
		req := httptest.NewRequest("GET", "/metrics", nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	body := func(resp *http.Response) string {
		t.Helper()
		r := resp.Body
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r)
			if err != nil {
				t.Fatal(err)
			}
			r = zr
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	resp := get(nil)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") || resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("plain GET: Content-Type %q, Content-Encoding %q", ct, resp.Header.Get("Content-Encoding"))
	}
	if b := body(resp); !strings.Contains(b, "test_flaky 1\n") {
		t.Errorf("plain GET:\n%s", b)
	}

	resp = get(map[string]string{"Accept": "application/openmetrics-text;version=1.0.0", "Accept-Encoding": "gzip"})
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/openmetrics-text") || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("OpenMetrics with gzip: Content-Type %q, Content-Encoding %q", ct, resp.Header.Get("Content-Encoding"))
	}
	if b := body(resp); !strings.Contains(b, "test_flaky 1.0\n") || !strings.HasSuffix(b, "# EOF\n") {
		t.Errorf("OpenMetrics:\n%s", b)
	}

	f.fail.Store(true)
	if resp := get(nil); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("gathering failed: status %d, want 500", resp.StatusCode)
	}
	f.fail.Store(false)
	if b := body(get(nil)); !strings.Contains(b, `promhttp_metric_handler_errors_total{cause="gathering"} 1`) {
		t.Errorf("after a failed page, no error counted:\n%s", b)
	}
}
