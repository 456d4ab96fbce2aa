//go:build !hookonly && !agentonly

package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/internal/httpserve"
	"github.com/iptables-alerter/iptables-alerter/internal/kubeauth"
)

// secureFlags serve metrics behind TLS and the API server's authentication
// and authorisation.
type secureFlags struct {
	addr, certFile, keyFile, agentMetrics string
}

func (f *secureFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "secure-metrics-addr", "", "serve /metrics over TLS here, e.g. :9443, each request's bearer token authenticated (TokenReview) and its user authorised to GET the path (SubjectAccessReview) by the API server; /metrics is then not served on --health-addr (empty: off)")
	fs.StringVar(&f.certFile, "tls-cert-file", "", "with --secure-metrics-addr: the serving certificate (PEM), read again when it changes")
	fs.StringVar(&f.keyFile, "tls-private-key-file", "", "with --secure-metrics-addr: the certificate's private key (PEM), read again when it changes")
	fs.StringVar(&f.agentMetrics, "agent-metrics", "", "with --secure-metrics-addr: the agent's plain /metrics on localhost (its --metrics-addr), e.g. http://127.0.0.1:9758/metrics, served at /metrics/agent")
}

// check says what is missing or set alone.
func (f *secureFlags) check() error {
	if f.addr == "" {
		if f.certFile != "" || f.keyFile != "" || f.agentMetrics != "" {
			return errors.New("--tls-cert-file, --tls-private-key-file and --agent-metrics need --secure-metrics-addr")
		}
		return nil
	}
	if f.certFile == "" || f.keyFile == "" {
		return errors.New("--secure-metrics-addr needs --tls-cert-file and --tls-private-key-file")
	}
	if f.agentMetrics != "" {
		u, err := url.Parse(f.agentMetrics)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return fmt.Errorf("--agent-metrics %q: want an http:// URL", f.agentMetrics)
		}
	}
	return nil
}

// serveSecure serves routes over TLS on addr, each request let through
// only when the API server (asked with rc's credentials, through a client
// and a review budget of the guard's own, never the delivery client's)
// authenticates its bearer token and authorises its user to GET the path;
// log hears why a review could not be made.
func serveSecure(addr, certFile, keyFile string, rc *rest.Config, routes map[string]http.Handler, log logrus.FieldLogger) (*http.Server, error) {
	certs, err := httpserve.LoadCertFiles(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	guard, err := kubeauth.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	guard.Log = func(err error) { log.WithError(err).Warn("secure metrics: cannot review a scraper's token") }
	// Each route is guarded, not the mux: a path it does not serve is
	// answered 404 without a review, so asking for made-up paths spends
	// no review budget and fills no verdict cache.
	mux := http.NewServeMux()
	for path, h := range routes {
		mux.Handle(path, guard.Wrap(h))
	}
	return httpserve.Start(httpserve.Options{Addr: addr, TLS: &tls.Config{GetCertificate: certs.GetCertificate}, Handler: mux})
}
