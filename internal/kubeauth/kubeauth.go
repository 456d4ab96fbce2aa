package kubeauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Defaults of the verdict caches: a scrape interval or two, and far more
// tokens than scrapers. Tokens the API server does not authenticate have
// a cache of their own, so a flood of bad tokens never evicts a
// scraper's verdict.
const (
	CacheTTL  = time.Minute
	CacheSize = 1000
)

// The review budget: new tokens (a cache miss) reviewed per second and
// at once. Past it a request is answered 429 without asking: a scraper
// needs a review a minute, and a flood of random tokens must cost the API
// server (and the daemon's own API budget) a bounded amount.
const (
	ReviewQPS   = 5
	ReviewBurst = 10
)

// The renewal budget: reviews of a token whose last verdict, now
// expired, let it through. Only a token the API server allowed gets it,
// so a flood of new tokens, which spends the review budget, cannot keep
// a scraper from renewing its verdict (and its scrapes from passing).
const (
	RenewQPS   = 1
	RenewBurst = 10
)

// reviewTimeout bounds one review: the server's write timeout is longer.
const reviewTimeout = 10 * time.Second

// ErrBusy is Check's error when the review budget is spent: asked again
// shortly, the token is reviewed.
var ErrBusy = errors.New("too many new tokens to review; try again shortly")

// User is who the API server says sent a token.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// reviewer asks the API server; the fake in the tests answers from a
// table.
type reviewer interface {
	// authenticate gives the token's user, ok false when the API server
	// does not authenticate it.
	authenticate(ctx context.Context, token string) (u User, ok bool, err error)
	// authorize says whether u may verb path.
	authorize(ctx context.Context, u User, verb, path string) (allowed bool, err error)
}

// Guard checks requests; one per server.
type Guard struct {
	r      reviewer
	ttl    time.Duration
	now    func() time.Time
	budget flowcontrol.RateLimiter
	renew  flowcontrol.RateLimiter
	// Log, when set, hears why a review could not be made (the client
	// is told only that it could not).
	Log func(error)
	mu  sync.Mutex
	// known holds the verdicts of authenticated tokens (200, 403) by
	// verb, path and token, expired ones until room is needed (a 200
	// expired marks the token for the renewal budget); unknown the tokens
	// the API server does not authenticate (401), by token alone.
	known, unknown cache
}

// verdict is a cached answer: the status to give (200 to pass).
type verdict struct {
	code    int
	expires time.Time
}

// New gives a Guard asking through cs. Its reviews are bounded by the
// review budget, not by cs' own rate limit: give it a client of its own
// (NewForConfig) when cs also does other work.
func New(cs kubernetes.Interface) *Guard {
	return newGuard(api{cs})
}

// NewForConfig gives a Guard asking with rc's credentials through a
// client of its own, whose rate limit is its own too: a flood of tokens
// never takes what another client made from rc (Events, Reports) may
// send.
func NewForConfig(rc *rest.Config) (*Guard, error) {
	c := rest.CopyConfig(rc)
	// A review is a TokenReview and a SubjectAccessReview: the client's
	// limit lets the budget through without waiting.
	c.RateLimiter, c.QPS, c.Burst = nil, 2*ReviewQPS, 2*ReviewBurst
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("make review client: %w", err)
	}
	return New(cs), nil
}

func newGuard(r reviewer) *Guard {
	return &Guard{r: r, ttl: CacheTTL, now: time.Now,
		budget:  flowcontrol.NewTokenBucketRateLimiter(ReviewQPS, ReviewBurst),
		renew:   flowcontrol.NewTokenBucketRateLimiter(RenewQPS, RenewBurst),
		known:   cache{size: CacheSize, keep: CacheTTL, m: map[[sha256.Size]byte]verdict{}},
		unknown: cache{size: CacheSize, m: map[[sha256.Size]byte]verdict{}}}
}

// Wrap passes to h only the requests the API server allows.
func (g *Guard) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="iptables-alerter"`)
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		code, err := g.Check(r.Context(), token, strings.ToLower(r.Method), r.URL.Path)
		switch {
		case errors.Is(err, ErrBusy):
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusTooManyRequests)
		case err != nil:
			// The error names the API server and the daemon's own
			// identity: the log, not the client, hears it.
			if g.Log != nil {
				g.Log(err)
			}
			http.Error(w, "cannot review the token now (the API server did not answer)", http.StatusServiceUnavailable)
		case code == http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="iptables-alerter"`)
			http.Error(w, "Unauthorized: the API server does not authenticate this token", code)
		case code == http.StatusForbidden:
			http.Error(w, fmt.Sprintf("Forbidden: may not %s %s", strings.ToLower(r.Method), r.URL.Path), code)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// Check gives 200, 401 or 403 for token doing verb on path, from the
// caches or, within the review budget, the API server; ErrBusy past the
// budget. An error (the API server not answering) is not cached.
func (g *Guard) Check(ctx context.Context, token, verb, path string) (int, error) {
	bad := sha256.Sum256([]byte(token))
	key := sha256.Sum256([]byte(verb + "\x00" + path + "\x00" + token))
	now := g.now()
	g.mu.Lock()
	v, ok := g.unknown.get(bad, now)
	if !ok {
		v, ok = g.known.get(key, now)
	}
	// A miss whose expired verdict passed: the renewal budget.
	renewing := !ok && g.known.m[key].code == http.StatusOK
	g.mu.Unlock()
	if ok {
		return v.code, nil
	}
	if !(renewing && g.renew.TryAccept()) && !g.budget.TryAccept() {
		return 0, ErrBusy
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	u, authed, err := g.r.authenticate(ctx, token)
	if err != nil {
		return 0, err
	}
	if !authed {
		g.mu.Lock()
		g.unknown.put(bad, verdict{code: http.StatusUnauthorized, expires: now.Add(g.ttl)}, now)
		g.mu.Unlock()
		return http.StatusUnauthorized, nil
	}
	code := http.StatusOK
	allowed, err := g.r.authorize(ctx, u, verb, path)
	if err != nil {
		return 0, err
	}
	if !allowed {
		code = http.StatusForbidden
	}
	g.mu.Lock()
	g.known.put(key, verdict{code: code, expires: now.Add(g.ttl)}, now)
	g.mu.Unlock()
	return code, nil
}

// cache is a bounded map of verdicts by a hash; the Guard's mutex guards
// it.
type cache struct {
	size int
	// keep is how long an expired pass still marks its token for the
	// renewal budget before it is evicted as readily as a refusal: a
	// token rotated away leaves its passes behind for good.
	keep time.Duration
	m    map[[sha256.Size]byte]verdict
}

// get gives the verdict for key unless it has expired.
func (c *cache) get(key [sha256.Size]byte, now time.Time) (verdict, bool) {
	v, ok := c.m[key]
	return v, ok && now.Before(v.expires)
}

// put keeps v, making room when the cache is full (a flood of fresh
// tokens evicts, it does not grow): refusals, expired then live, before
// passes, expired then live. Any pod's token is authenticated, so
// refusals are what a flood from inside the cluster fills the cache
// with; a scraper's pass, even expired (it marks the token for the
// renewal budget), goes last, unless it expired more than keep ago.
func (c *cache) put(key [sha256.Size]byte, v verdict, now time.Time) {
	if _, ok := c.m[key]; !ok && len(c.m) >= c.size {
		for _, evict := range []func(verdict) bool{
			func(old verdict) bool {
				return !now.Before(old.expires) && (old.code != http.StatusOK || !now.Before(old.expires.Add(c.keep)))
			},
			func(old verdict) bool { return old.code != http.StatusOK },
			func(old verdict) bool { return !now.Before(old.expires) },
			func(verdict) bool { return true },
		} {
			for k, old := range c.m {
				if len(c.m) < c.size {
					break
				}
				if evict(old) {
					delete(c.m, k)
				}
			}
		}
	}
	c.m[key] = v
}

// bearer gives the token of an "Authorization: Bearer TOKEN" header.
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// api is the reviewer that asks the API server.
type api struct{ cs kubernetes.Interface }

func (a api) authenticate(ctx context.Context, token string) (User, bool, error) {
	tr, err := a.cs.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return User{}, false, fmt.Errorf("create token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return User{}, false, nil
	}
	ui := tr.Status.User
	u := User{Name: ui.Username, UID: ui.UID, Groups: ui.Groups}
	if len(ui.Extra) > 0 {
		u.Extra = make(map[string][]string, len(ui.Extra))
		for k, v := range ui.Extra {
			u.Extra[k] = v
		}
	}
	return u, true, nil
}

func (a api) authorize(ctx context.Context, u User, verb, path string) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:                  u.Name,
		UID:                   u.UID,
		Groups:                u.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	if len(u.Extra) > 0 {
		sar.Spec.Extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			sar.Spec.Extra[k] = v
		}
	}
	res, err := a.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("create subject access review: %w", err)
	}
	return res.Status.Allowed, nil
}
