package httpserve

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// upstreamTimeout bounds one fetch from the upstream: less than the
// server's write timeout, so a hung upstream gives a 502, not a cut reply;
// the request's context (handlerTimeout) also bounds it, counted from the
// handler's start, so a slow token review before it leaves the 502 time
// too.
const upstreamTimeout = 20 * time.Second

// Upstream serves the page at url (a plain-HTTP /metrics on localhost),
// fetched anew for each request. An upstream that does not answer 200 is
// a 502: the scrape fails, and Prometheus' up says so, rather than an
// empty page that reads as "no metrics".
func Upstream(url string) http.Handler {
	client := &http.Client{Timeout: upstreamTimeout}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, url, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// The scraper's choice of format (OpenMetrics or text) is the
		// upstream's to honour; compression is the client's own.
		if accept := r.Header.Get("Accept"); accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, fmt.Sprintf("fetch upstream metrics: %v", err), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			http.Error(w, fmt.Sprintf("fetch upstream metrics: %s", resp.Status), http.StatusBadGateway)
			return
		}
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		_, _ = io.Copy(w, resp.Body)
	})
}
