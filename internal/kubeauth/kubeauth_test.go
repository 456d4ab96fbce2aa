package kubeauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// fake answers from tables and counts the calls.
type fake struct {
	users   map[string]User            // token -> user
	allowed map[string]map[string]bool // user -> path -> allowed
	down    bool
	calls   int
}

func (f *fake) authenticate(_ context.Context, token string) (User, bool, error) {
	f.calls++
	if f.down {
		return User{}, false, errors.New("connection refused")
	}
	u, ok := f.users[token]
	return u, ok, nil
}

func (f *fake) authorize(_ context.Context, u User, verb, path string) (bool, error) {
	f.calls++
	if f.down {
		return false, errors.New("connection refused")
	}
	return verb == "get" && f.allowed[u.Name][path], nil
}

func TestWrap(t *testing.T) {
	f := &fake{
		users:   map[string]User{"good": {Name: "prom"}, "other": {Name: "someone"}},
		allowed: map[string]map[string]bool{"prom": {"/metrics": true}},
	}
	g := newGuard(f)
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("page")) }))
	cases := []struct {
		name, method, path, auth string
		want                     int
	}{
		{name: "allowed", method: "GET", path: "/metrics", auth: "Bearer good", want: 200},
		{name: "allowed, scheme in lower case", method: "GET", path: "/metrics", auth: "bearer good", want: 200},
		{name: "other path", method: "GET", path: "/metrics/agent", auth: "Bearer good", want: 403},
		{name: "not bound", method: "GET", path: "/metrics", auth: "Bearer other", want: 403},
		{name: "unknown token", method: "GET", path: "/metrics", auth: "Bearer forged", want: 401},
		{name: "no token", method: "GET", path: "/metrics", want: 401},
		{name: "empty token", method: "GET", path: "/metrics", auth: "Bearer ", want: 401},
		{name: "basic auth", method: "GET", path: "/metrics", auth: "Basic Z29vZDo=", want: 401},
		{name: "post", method: "POST", path: "/metrics", auth: "Bearer good", want: 405},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d (%s)", w.Code, tc.want, w.Body)
			}
			if tc.want == 200 && w.Body.String() != "page" {
				t.Fatalf("body %q", w.Body)
			}
			if tc.want == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

// TestCache: a verdict is reused until it expires, an API error is not
// cached (503, asked again next time), and a flood of tokens does not
// grow the cache past its size.
func TestCache(t *testing.T) {
	f := &fake{users: map[string]User{"good": {Name: "prom"}}, allowed: map[string]map[string]bool{"prom": {"/metrics": true}}}
	g := newGuard(f)
	now := time.Unix(1e9, 0)
	g.now = func() time.Time { return now }
	ctx := context.Background()
	check := func(token string, want int) {
		t.Helper()
		code, err := g.Check(ctx, token, "get", "/metrics")
		if err != nil || code != want {
			t.Fatalf("Check(%q) = %d, %v; want %d", token, code, err, want)
		}
	}
	check("good", 200)
	check("good", 200)
	check("forged", 401)
	check("forged", 401)
	if f.calls != 3 { // good: token + access review; forged: token review
		t.Fatalf("%d API calls, want 3 (the repeats from the cache)", f.calls)
	}
	now = now.Add(CacheTTL)
	f.down = true
	if _, err := g.Check(ctx, "good", "get", "/metrics"); err == nil {
		t.Fatal("expired verdict served while the API server is down")
	}
	f.down = false
	check("good", 200)

	g.unknown.size = 10
	g.budget = flowcontrol.NewFakeAlwaysRateLimiter()
	for i := range 100 {
		check(string(rune('A'+i)), 401)
	}
	if len(g.unknown.m) > 10 {
		t.Fatalf("cache of bad tokens holds %d verdicts, bound 10", len(g.unknown.m))
	}
	// The flood of bad tokens evicted no verdict of a good one.
	calls := f.calls
	check("good", 200)
	if f.calls != calls {
		t.Fatal("good token's verdict evicted by bad tokens")
	}
	// A bad token asked again is answered from its cache.
	check("forged", 401)
	check("forged", 401)
	if f.calls != calls+1 {
		t.Fatalf("%d API calls for a bad token asked twice, want 1", f.calls-calls)
	}
}

// TestBudget: past the review budget a new token is answered 429 (with
// Retry-After) without asking the API server; tokens with a verdict are
// still answered from the caches.
func TestBudget(t *testing.T) {
	f := &fake{users: map[string]User{"good": {Name: "prom"}}, allowed: map[string]map[string]bool{"prom": {"/metrics": true}}}
	g := newGuard(f)
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("page")) }))
	get := func(token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := get("good"); w.Code != 200 {
		t.Fatalf("good token: %d", w.Code)
	}
	busy, start := 0, time.Now()
	for i := range 1000 {
		switch w := get(fmt.Sprintf("random-%d", i)); w.Code {
		case http.StatusTooManyRequests:
			busy++
			if w.Header().Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		case http.StatusUnauthorized:
		default:
			t.Fatalf("random token: %d", w.Code)
		}
	}
	// The budget is ReviewBurst at once and ReviewQPS a second, over the
	// loop's time as the test saw it (at least the guard's).
	bound := ReviewBurst + int(ReviewQPS*time.Since(start).Seconds()) + 1
	if calls := f.calls - 2; calls > bound || busy == 0 {
		t.Fatalf("%d reviews for 1,000 random tokens (%d answered 429), want the budget's bound", calls, busy)
	}
	if w := get("good"); w.Code != 200 || w.Body.String() != "page" {
		t.Fatalf("good token during the flood: %d", w.Code)
	}
}

// TestUnavailable: an API server that cannot be asked gives 503, never
// the page.
func TestUnavailable(t *testing.T) {
	g := newGuard(&fake{down: true})
	h := g.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler reached") }))
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.Header.Set("Authorization", "Bearer good")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
	// The error names the API server and the daemon's identity: the
	// log hears it, the client (unauthenticated) does not.
	if strings.Contains(w.Body.String(), "connection refused") {
		t.Errorf("503 body %q gives the client the review's error", w.Body.String())
	}
	var logged []error
	g.Log = func(err error) { logged = append(logged, err) }
	h.ServeHTTP(httptest.NewRecorder(), r)
	if len(logged) != 1 || !strings.Contains(logged[0].Error(), "connection refused") {
		t.Errorf("logged %v, want the review's error once", logged)
	}
}

// TestRenewDuringFlood: a scraper's verdict expires every CacheTTL; a
// flood of new tokens spends the review budget, and the scraper's token,
// a miss again, was answered 429 for as long as the flood lasted (its
// metrics gone dark). A token whose expired verdict passed is reviewed
// on a budget of its own.
func TestRenewDuringFlood(t *testing.T) {
	f := &fake{users: map[string]User{"good": {Name: "prom"}, "other": {Name: "pod"}}, allowed: map[string]map[string]bool{"prom": {"/metrics": true}}}
	g := newGuard(f)
	now := time.Now()
	g.now = func() time.Time { return now }
	ctx := context.Background()
	if code, err := g.Check(ctx, "good", "get", "/metrics"); code != 200 || err != nil {
		t.Fatal(code, err)
	}
	if code, err := g.Check(ctx, "other", "get", "/metrics"); code != http.StatusForbidden || err != nil {
		t.Fatal(code, err)
	}
	for round := range 3 {
		now = now.Add(CacheTTL + time.Second)
		for i := range 50 {
			_, _ = g.Check(ctx, fmt.Sprintf("junk-%d-%d", round, i), "get", "/metrics")
		}
		if code, err := g.Check(ctx, "good", "get", "/metrics"); err != nil || code != 200 {
			t.Fatalf("the scraper, its verdict expired, during a flood (round %d): %d, %v; want 200", round, code, err)
		}
	}
	// A token refused before has no renewal: the flood's budget holds.
	if _, err := g.Check(ctx, "other", "get", "/metrics"); !errors.Is(err, ErrBusy) {
		t.Errorf("a refused token, its verdict expired, during a flood: %v, want ErrBusy", err)
	}
}

// TestEvictRefusalsFirst: any pod's token is authenticated, so a flood
// from inside the cluster (one token, made-up paths) fills the cache
// with refusals; room is made among them, not by evicting the scraper's
// pass, which would cost it a review (and, in a flood, a 429).
func TestEvictRefusalsFirst(t *testing.T) {
	f := &fake{users: map[string]User{"good": {Name: "prom"}, "pod": {Name: "pod"}}, allowed: map[string]map[string]bool{"prom": {"/metrics": true}}}
	g := newGuard(f)
	g.budget = flowcontrol.NewFakeAlwaysRateLimiter()
	ctx := context.Background()
	if code, err := g.Check(ctx, "good", "get", "/metrics"); code != 200 || err != nil {
		t.Fatal(code, err)
	}
	for i := range 3 * CacheSize {
		if code, err := g.Check(ctx, "pod", "get", fmt.Sprintf("/x%d", i)); code != http.StatusForbidden || err != nil {
			t.Fatalf("pod on /x%d: %d, %v", i, code, err)
		}
	}
	calls := f.calls
	if code, err := g.Check(ctx, "good", "get", "/metrics"); code != 200 || err != nil || f.calls != calls {
		t.Errorf("the scraper after the flood: %d, %v, %d reviews; want 200 from the cache", code, err, f.calls-calls)
	}
	if n := len(g.known.m); n > CacheSize {
		t.Errorf("cache holds %d verdicts, want at most %d", n, CacheSize)
	}
}
