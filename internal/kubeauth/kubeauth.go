package kubeauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Defaults of the verdict cache: a scrape interval or two, and far more
// tokens than scrapers.
const (
	CacheTTL  = time.Minute
	CacheSize = 1000
)

// reviewTimeout bounds one review: the server's write timeout is longer.
const reviewTimeout = 10 * time.Second

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
	r     reviewer
	ttl   time.Duration
	size  int
	now   func() time.Time
	mu    sync.Mutex
	cache map[[sha256.Size]byte]verdict
}

// verdict is a cached answer: the status to give (200 to pass).
type verdict struct {
	code    int
	expires time.Time
}

// New gives a Guard asking through cs.
func New(cs kubernetes.Interface) *Guard {
	return newGuard(api{cs})
}

func newGuard(r reviewer) *Guard {
	return &Guard{r: r, ttl: CacheTTL, size: CacheSize, now: time.Now, cache: map[[sha256.Size]byte]verdict{}}
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
		case err != nil:
			http.Error(w, "cannot review the token: "+err.Error(), http.StatusServiceUnavailable)
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
// cache or the API server; an error (the API server not answering) is not
// cached.
func (g *Guard) Check(ctx context.Context, token, verb, path string) (int, error) {
	key := sha256.Sum256([]byte(verb + "\x00" + path + "\x00" + token))
	now := g.now()
	g.mu.Lock()
	v, ok := g.cache[key]
	g.mu.Unlock()
	if ok && now.Before(v.expires) {
		return v.code, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	code := http.StatusOK
	u, authed, err := g.r.authenticate(ctx, token)
	if err != nil {
		return 0, err
	}
	if !authed {
		code = http.StatusUnauthorized
	} else {
		allowed, err := g.r.authorize(ctx, u, verb, path)
		if err != nil {
			return 0, err
		}
		if !allowed {
			code = http.StatusForbidden
		}
	}
	g.store(key, verdict{code: code, expires: now.Add(g.ttl)})
	return code, nil
}

// store keeps v, making room when the cache is full: the expired first,
// else any one (a flood of fresh tokens evicts, it does not grow).
func (g *Guard) store(key [sha256.Size]byte, v verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.cache[key]; !ok && len(g.cache) >= g.size {
		now := g.now()
		for k, old := range g.cache {
			if !now.Before(old.expires) {
				delete(g.cache, k)
			}
		}
		for k := range g.cache {
			if len(g.cache) < g.size {
				break
			}
			delete(g.cache, k)
		}
	}
	g.cache[key] = v
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
